#!/usr/bin/env bash
# Interleaved rounds (session 11): dense, qsgd 4 bit and oktopk 0.01, one
# after the other, ROUNDS times, so that the VM's drifting speed (runs of one
# schedule minutes apart differed by 20%) falls alike on all three. P = 4
# netlab hosts, 64 MiB of fp32 input per rank. Writes round<i>_<name>.txt
# in OUT (default: here); table.py prints per-schedule medians and ratios.
#   docs/results/reduce_scatter/rounds/run.sh [ROUNDS=5] [RATE=1gbit] [OUT]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../.." && pwd)
rounds=${1:-5} rate=${2:-1gbit} out=${3:-$here}
mkdir -p "$out"
bench="$root/build/tools/gradcomp-bench/gradcomp-bench"
run() {  # name, args...
  local name=$1; shift
  NETLAB_BUILD="$root/build" "$root/tools/netlab/netlab.sh" -n 4 --rate "$rate" --ranks -- \
    "$bench" --coll reducescatter -b 64M -e 64M -c 0 "$@" \
    > "$out/round${i}_${rate}_${name}.txt" 2>&1
}
for i in $(seq "$rounds"); do
  run dense --algo dense -n 5 -w 1
  run qsgd4 --algo qsgd --bits 4 -n 10 -w 2
  run oktopk --algo oktopk --density 0.01 -n 20 -w 2
done

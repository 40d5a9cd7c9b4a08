#!/usr/bin/env bash
# ZeRO-3 step time on emulated hosts (issue 42): gradcomp-train --sharded, MLP
# (one 2.1 MB bucket), 4 netlab hosts at RATE, 1 epoch of the first 16000
# training images (125 steps of 32 per rank), dense reduce-scatter + dense
# allgather against qsgd 4-bit reduce-scatter + blockq int8 allgather,
# interleaved ROUNDS times. Writes <round>_<name>.json (gradcomp-train -J).
#   docs/results/allgather/netlab/zero3/run.sh [ROUNDS=3] [RATE=1gbit] [OUT=here]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../../.." && pwd)
rounds=${1:-3} rate=${2:-1gbit} out=${3:-$here}
mkdir -p "$out"
train() {  # name, args...
  local name=$1; shift
  NETLAB_BUILD="$root/build" "$root/tools/netlab/netlab.sh" -n 4 --rate "$rate" --ranks -- \
    "$root/build/tools/gradcomp-train/gradcomp-train" --sharded --epochs 1 --train-limit 16000 \
    --momentum-correction off -J "$out/round${i}_${rate}_${name}.json" "$@" \
    > "$out/round${i}_${rate}_${name}.txt" 2>&1
}
for i in $(seq "$rounds"); do
  echo "== round $i $(date +%T) (load $(cut -d' ' -f1-3 /proc/loadavg))"
  train dense --algo dense --ag-algo dense
  train qsgd4-int8 --algo qsgd --bits 4 --ag-algo blockq --ag-bits 8
done

#!/usr/bin/env bash
# Compressed allgather on emulated hosts (issue 42): P = 4 netlab hosts, one
# rank each, 64 MiB fp32 output (16 MiB shard per rank). Interleaved rounds,
# as docs/results/reduce_scatter/rounds/ does, so the VM's drifting speed
# falls alike on every schedule: gradcomp dense, blockq 8 bit, blockq 4 bit,
# cast fp8, then Open MPI's MPI_Allgather (its default choice and the ring).
# Writes round<i>_<rate>_<name>.txt in OUT; table.py prints the medians.
#   docs/results/allgather/netlab/run.sh [ROUNDS=5] [RATE=1gbit] [OUT=here]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../.." && pwd)
rounds=${1:-5} rate=${2:-1gbit} out=${3:-$here}
mkdir -p "$out"
bench="$root/build/tools/gradcomp-bench/gradcomp-bench"
lab=("$root/tools/netlab/netlab.sh" -n 4 --rate "$rate")
gc() {  # name, args...: -c 0, the timed calls only (correctness: the -c 1 run below, and CI)
  local name=$1; shift
  NETLAB_BUILD="$root/build" "${lab[@]}" --ranks -- \
    "$bench" --coll allgather -b 64M -e 64M -c 0 "$@" > "$out/round${i}_${rate}_${name}.txt" 2>&1
}
mpi() {  # name (default, ring)
  "${lab[@]}" -- "$root/tools/netlab/mpi-run.sh" "$1" -g -n 5 -w 1 64M \
    > "$out/round${i}_${rate}_mpi-$1.txt" 2>&1
}
for i in $(seq "$rounds"); do
  echo "== round $i $(date +%T) (load $(cut -d' ' -f1-3 /proc/loadavg))"
  gc dense --algo dense -n 5 -w 1
  gc blockq8 --algo blockq --bits 8 -n 10 -w 2
  gc blockq4 --algo blockq --bits 4 -n 10 -w 2
  gc fp8 --algo cast --param AG_CAST=fp8 -n 10 -w 2
  mpi default
  mpi ring
done
# One checked run per schedule (-c 1: every call against its reference).
i=check
for a in "dense --algo dense" "blockq8 --algo blockq --bits 8" "blockq4 --algo blockq --bits 4" \
         "fp8 --algo cast --param AG_CAST=fp8"; do
  set -- $a
  name=$1; shift
  NETLAB_BUILD="$root/build" "${lab[@]}" --ranks -- \
    "$bench" --coll allgather -b 64M -e 64M -c 1 -n 2 -w 1 "$@" > "$out/check_${rate}_${name}.txt" 2>&1
done

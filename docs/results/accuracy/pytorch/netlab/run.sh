#!/usr/bin/env bash
# Time to accuracy of the character LM (issue 43, part 4): P = 4 netlab
# hosts, gloo's dense allreduce against gradcomp.torch's hook with oktopk
# (density 0.01) and qsgd (4 bit), interleaved, at each RATE given.
#   [ALGOS="dense qsgd"] docs/results/accuracy/pytorch/netlab/run.sh OUT STEPS RATE...
# Then: examples/pytorch/time_to_accuracy.py OUT/*.json
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../../.." && pwd)
out=${1:?OUT} steps=${2:?STEPS}; shift 2
mkdir -p "$out"
py=/usr/bin/python3  # Debian's, with python3-torch
for rate in "$@"; do
  for algo in ${ALGOS:-dense oktopk qsgd}; do
    echo "== $(date +%T) $rate $algo (load $(cut -d' ' -f1-3 /proc/loadavg))"
    NETLAB_BUILD="$root/build" "$root/tools/netlab/netlab.sh" -n 4 --rate "$rate" --timeout 1200 \
      --ranks -- "$py" "$root/examples/pytorch/netlab_time_to_accuracy.py" --algo "$algo" \
      --steps "$steps" --eval-every 20 --out "$out/${rate}_${algo}.json" \
      > "$out/${rate}_${algo}.log" 2>&1 || echo "   failed: see $out/${rate}_${algo}.log"
  done
done

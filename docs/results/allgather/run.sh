#!/bin/bash
# Issue 42 part 4: accuracy of ZeRO-3 training with a compressed parameter
# allgather (gradcomp-train --sharded --ag-algo), MLP and CNN, seeds 1-5,
# 4 ranks, against the dense allgather with the same (dense) gradient
# reduce-scatter; one run at a time at nice 10, seeds outermost so a cut-short
# matrix leaves whole seeds. The horizon is 1 epoch of the full training set
# (468 steps), not the allreduce matrix's 2: the whole matrix (50 runs) must
# fit in about 45 minutes on a shared 2-core machine. A finished run (its
# .json holds epoch 1) is not rerun. Prints the table (table.py) at the end.
# Usage: run.sh [MODELS] [SEEDS]; BIN overrides the gradcomp-train binary
# (copy it out of build/ first if others rebuild there during the matrix).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../../../build/tools/gradcomp-train/gradcomp-train}
models=${1:-"mlp cnn"} seeds=${2:-"1 2 3 4 5"}
run() {  # label, flags...
  local out=$here/$1; shift
  [ -s $out.json ] && grep -q '"epoch": 1' $out.json && return
  echo "== gradcomp-train --ranks 4 $* --epochs 1 --sharded" > $out.txt
  local t0=$(date +%s)
  nice -n 10 $bin --ranks 4 "$@" --epochs 1 --sharded -J $out.json >> $out.txt 2>&1
  echo "$(basename $out): exit $? in $(( $(date +%s) - t0 )) s, test_acc $(python3 -c \
    "import json,sys;print(json.load(open(sys.argv[1]))[-1]['test_acc'])" $out.json 2>/dev/null)"
}
for s in $seeds; do for m in $models; do
  run ${m}_dense_s$s    --model $m --seed $s --ag-algo dense
  run ${m}_int8_s$s     --model $m --seed $s --ag-algo blockq --ag-bits 8
  run ${m}_int4_s$s     --model $m --seed $s --ag-algo blockq --ag-bits 4
  run ${m}_fp8_s$s      --model $m --seed $s --ag-algo cast --ag-cast fp8
  run ${m}_int8qsgd4_s$s --model $m --seed $s --ag-algo blockq --ag-bits 8 --algo qsgd --bits 4
done; done
python3 $here/table.py

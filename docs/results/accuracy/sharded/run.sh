#!/bin/bash
# Issue 34: accuracy of sharded training (gradcomp-train --sharded: ZeRO-2,
# gradients reduce-scattered per bucket, each rank steps its shard, dense
# parameter allgather) for every algorithm with a reduce-scatter form, at
# the defaults, seeds 1-5, one run at a time; gaps are to the sharded dense
# run of the same seed (table.py). Momentum correction auto, as for allreduce
# (on for the top-k methods and sign: the velocity is reduce-scattered and
# cleared where the step changed a parameter).
# Usage: run.sh [MODELS] [SEEDS]; BIN overrides the gradcomp-train binary.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../../../../build/tools/gradcomp-train/gradcomp-train}
models=${1:-"mlp cnn"} seeds=${2:-"1 2 3 4 5"}
run() {  # label, flags...
  local out=$here/$1; shift
  [ -s $out.json ] && return
  echo "== gradcomp-train --ranks 4 $* --epochs 2 --sharded" > $out.txt
  nice -n 10 $bin --ranks 4 "$@" --epochs 2 --sharded -J $out.json >> $out.txt 2>&1
  echo "$(basename $out): $(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))[-1][\"test_acc\"])" $out.json)"
}
for m in $models; do for s in $seeds; do
  for a in dense qsgd oktopk cltk rbf sign; do
    run ${m}_${a}_s$s --model $m --algo $a --seed $s
  done
  run ${m}_qsgd4_s$s --model $m --algo qsgd --bits 4 --seed $s
done; done

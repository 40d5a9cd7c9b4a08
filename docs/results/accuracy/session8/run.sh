#!/bin/bash
# Issue 24, session 8: the whole seed matrix again, every algorithm at the
# defaults of commit 1bf13bb (cltk: every rank leads; qsgd: owner-side error
# feedback; momentum correction auto; sign ties by hash), on one machine, one
# run at a time, so every gap is to a dense run of the same machine and build.
# Usage: run.sh [MODELS] [SEEDS]; BIN overrides the gradcomp-train binary.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../../../../build/tools/gradcomp-train/gradcomp-train}
models=${1:-"mlp cnn"} seeds=${2:-"1 2 3 4 5"}
run() {  # label, flags...
  local out=$here/$1; shift
  [ -s $out.json ] && return
  echo "== gradcomp-train --ranks 4 $* --epochs 2" > $out.txt
  nice -n 10 $bin --ranks 4 "$@" --epochs 2 -J $out.json >> $out.txt 2>&1
  echo "$(basename $out): $(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))[-1][\"test_acc\"])" $out.json)"
}
for m in $models; do for s in $seeds; do
  for a in dense oktopk cltk gaussiank topka dsa gtopk qsgd rbf sign fft; do
    run ${m}_${a}_s$s --model $m --algo $a --seed $s
  done
  run ${m}_qsgd4_s$s --model $m --algo qsgd --bits 4 --seed $s
  run ${m}_wagma_s$s --model $m --algo wagma --average weights --period 1 --seed $s
done; done

#!/bin/bash
# Issue 24 seed matrix: every algorithm at its defaults (and qsgd 4 bit), both
# models, 4 ranks, 2 epochs, seeds 1-5, the default learning rate.
T=/work/main/build-cpu/tools/gradcomp-train/gradcomp-train
cd /tmp/acc5
run() {  # name, flags...
  local f=$1; shift
  [ -s $f.json ] && grep -q '"epoch": 2' $f.json && return
  echo "== gradcomp-train --ranks 4 $* --epochs 2" > $f.txt
  $T --ranks 4 "$@" --epochs 2 -J $f.json >> $f.txt 2>&1
}
for m in mlp cnn; do
  for s in 1 2 3 4 5; do
    for a in dense oktopk cltk gaussiank topka dsa gtopk qsgd rbf sign fft wagma; do
      run ${m}_${a}_s$s --model $m --algo $a --seed $s
    done
    run ${m}_qsgd4_s$s --model $m --algo qsgd --bits 4 --seed $s
  done
done
echo ALLDONE

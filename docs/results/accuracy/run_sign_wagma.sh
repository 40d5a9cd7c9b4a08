#!/bin/bash
# After --momentum-correction auto covers sign: sign rows again; wagma as its
# README runs it (model averaging every step).
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
    run ${m}_sign_s$s --model $m --algo sign --seed $s
    run ${m}_wagma_s$s --model $m --algo wagma --average weights --period 1 --seed $s
  done
done
echo ALLDONE

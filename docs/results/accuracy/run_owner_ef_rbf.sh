#!/bin/bash
# As run (accuracy-qsgd branch, before the default became on, so on is the
# explicit --param): T=<build>/tools/gradcomp-train/gradcomp-train OUT=<dir> ./run_owner_ef_rbf.sh
# rbf shares the code exchange: owner EF on and off, both models, seeds 1-5.
T=${T:-./gradcomp-train}
OUT=${OUT:-.}
run() {  # name, flags...
  local f=$OUT/$1; shift
  [ -s $f.json ] && grep -q '"epoch": 2' $f.json && return
  echo "== gradcomp-train --ranks 4 $* --epochs 2" > $f.txt
  $T --ranks 4 "$@" --epochs 2 -J $f.json >> $f.txt 2>&1
}
ON="--param QUANT_OWNER_EF=on"
for m in cnn mlp; do
  for s in 1 2 3 4 5; do
    run ${m}_rbf_ownerEF_s$s --model $m --algo rbf --seed $s $ON
    run ${m}_rbf_rerun_s$s --model $m --algo rbf --seed $s
  done
done
echo ALLDONE

#!/bin/bash
# As run (accuracy-qsgd branch, before the default became on, so on is the
# explicit --param): T=<build>/tools/gradcomp-train/gradcomp-train OUT=<dir> ./run_owner_ef_seeds6_10.sh
# Seeds 6-10 on the CNN (dense, qsgd 8 bit with and without owner EF): the
# per-seed noise floor is about the band, so 5 more seeds for the mean.
T=${T:-./gradcomp-train}
OUT=${OUT:-.}
run() {  # name, flags...
  local f=$OUT/$1; shift
  [ -s $f.json ] && grep -q '"epoch": 2' $f.json && return
  echo "== gradcomp-train --ranks 4 $* --epochs 2" > $f.txt
  $T --ranks 4 "$@" --epochs 2 -J $f.json >> $f.txt 2>&1
}
ON="--param QUANT_OWNER_EF=on"
for s in 6 7 8 9 10; do
  run cnn_dense_rerun_s$s --model cnn --algo dense --seed $s
  run cnn_qsgd_rerun_s$s --model cnn --algo qsgd --seed $s
  run cnn_qsgd_ownerEF_s$s --model cnn --algo qsgd --seed $s $ON
done
echo ALLDONE

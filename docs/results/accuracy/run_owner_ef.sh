#!/bin/bash
# As run (accuracy-qsgd branch, before the default became on, so on is the
# explicit --param): T=<build>/tools/gradcomp-train/gradcomp-train OUT=<dir> ./run_owner_ef.sh
# qsgd owner-side error feedback (GRADCOMP_QUANT_OWNER_EF) against dense and
# qsgd without it, all rerun with one binary on one machine (issue 24 matrix
# settings: 4 ranks, 2 epochs, default lr, seeds 1-5).
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
  for s in 1 2 3 4 5; do run ${m}_qsgd_ownerEF_s$s --model $m --algo qsgd --seed $s $ON; done
  for s in 1 2 3 4 5; do run ${m}_dense_rerun_s$s --model $m --algo dense --seed $s; done
  for s in 1 2 3 4 5; do run ${m}_qsgd_rerun_s$s --model $m --algo qsgd --seed $s; done
done
for s in 1 2 3 4 5; do run cnn_qsgd4_ownerEF_s$s --model cnn --algo qsgd --bits 4 --seed $s $ON; done
for s in 1 2 3 4 5; do run cnn_qsgd4_rerun_s$s --model cnn --algo qsgd --bits 4 --seed $s; done
echo ALLDONE

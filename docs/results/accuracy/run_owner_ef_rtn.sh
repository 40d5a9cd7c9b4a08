#!/bin/bash
# As run: T=<build with owner_ef_rtn_experiment.patch>/tools/gradcomp-train/gradcomp-train OUT=<dir> ./run_owner_ef_rtn.sh
# Experiment (not in the library): qsgd rounding to nearest instead of
# stochastic rounding, owner EF on; a throwaway build whose CPU quantizeMaxMin
# uses u = 0.5 when GC_HACK_RTN is set.
T=${T:-./gradcomp-train-rtn}
OUT=${OUT:-.}
run() {
  local f=$OUT/$1; shift
  [ -s $f.json ] && grep -q '"epoch": 2' $f.json && return
  echo "== GC_HACK_RTN=1 gradcomp-train --ranks 4 $* --epochs 2" > $f.txt
  GC_HACK_RTN=1 $T --ranks 4 "$@" --epochs 2 -J $f.json >> $f.txt 2>&1
}
for s in 1 2 3 4 5; do run cnn_qsgd_ownerEF_rtn_s$s --model cnn --algo qsgd --seed $s --param QUANT_OWNER_EF=on; done
echo ALLDONE

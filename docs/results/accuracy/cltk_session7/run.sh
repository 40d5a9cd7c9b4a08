#!/bin/bash
# Usage: run.sh LABEL MODELS SEEDS ALGO [extra gradcomp-train args...]
# Writes {model}_{LABEL}_s{S}.json/.txt here; one run at a time, nice 10.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../../../../build/tools/gradcomp-train/gradcomp-train}
label=$1 models=$2 seeds=$3 algo=$4; shift 4
for m in $models; do for s in $seeds; do
  out=$here/${m}_${label}_s$s
  [ -s $out.json ] && continue
  nice -n 10 $bin --ranks 4 --model $m --algo $algo --seed $s --epochs 2 "$@" -J $out.json > $out.txt 2>&1
  echo "$m $label s$s: $(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))[-1][\"test_acc\"])" $out.json)"
done; done

#!/bin/bash
# Noise floor of the per-seed gap (issue 24): dense with recursive doubling at
# every size (GRADCOMP_DENSE_RD_MAX_BYTES=1G: the same sum in another fp32
# order) against dense with the ring, same seed, same everything else; and the
# ring twice (run-to-run determinism on one machine).
T=${T:-build/tools/gradcomp-train/gradcomp-train}
out=${1:-/tmp/noise}
mkdir -p "$out"
for m in cnn mlp; do for s in 1 2 3 4 5; do
  $T --ranks 4 --model $m --algo dense --seed $s --epochs 2 --param DENSE_RD_MAX_BYTES=1G \
     -J "$out/${m}_rd_s$s.json"
done; done
$T --ranks 4 --model cnn --algo dense --seed 1 --epochs 2 -J "$out/cnn_ring_s1.json"
$T --ranks 4 --model cnn --algo dense --seed 1 --epochs 2 -J "$out/cnn_ring_s1_b.json"

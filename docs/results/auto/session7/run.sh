#!/usr/bin/env bash
# Session 7 (issue 22): auto after two chooser changes (stale re-checks within
# 1% of a class's time; a compressor must beat dense by the hysteresis).
# Needs root (network namespaces) and an idle machine.
#   docs/results/auto/session7/run.sh BUILD OUTDIR
set -euo pipefail
build=${1:?usage: run.sh BUILD OUTDIR} out=${2:?usage: run.sh BUILD OUTDIR}
tools=$(dirname "$0")/../../../../tools
mkdir -p "$out"
# Steady state, 1 Gbit/s, 100 MiB: oktopk fixed and auto after 300 calls,
# three runs in alternating order.
for i in 1 2 3; do
  rev=(); ((i % 2 == 0)) && rev=(--reverse)
  "$tools/gradcomp-lab" --build "$build" --ranks 4 --rates 1gbit --sizes 100M --algos oktopk,auto \
    --labels "oktopk d=0.01,auto" --mpi none --iters 10 --auto-warmup 300 --timeout 900 "${rev[@]}" \
    --out "$out/steady_1g_100M_run$i"
done
# Loopback, every candidate and auto (64 warm-up calls a row), twice.
for i in 1 2; do
  python3 "$tools/netlab/auto_compare.py" loopback --build "$build" --sizes 1M,16M,100M \
    --out "$out/loopback_run$i.json"
done

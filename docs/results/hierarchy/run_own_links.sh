#!/usr/bin/env bash
# Session 7 (issue 21): flat vs hierarchical with a link per rank (a NIC per
# GPU) and shared memory inside a host, and with one shared link per host,
# now with shared memory inside the host. 2 hosts x 2 ranks, 100 MiB fp32.
# Needs root (network namespaces) and an idle machine.
#   docs/results/hierarchy/run_own_links.sh BUILD OUTDIR
set -euo pipefail
build=${1:?usage: run_own_links.sh BUILD OUTDIR} out=${2:?usage: run_own_links.sh BUILD OUTDIR}
lab=$(dirname "$0")/../../../tools/gradcomp-lab
common=(--build "$build" --ranks 4 --ranks-per-host 2 --sizes 100M --algos dense,oktopk,qsgd
        --labels "dense,oktopk d=0.01,qsgd 4 bit" --hierarchy flat,host --mpi none --iters 3 --warmup 1)
for rate in 1gbit 100mbit; do
  "$lab" "${common[@]}" --own-links --rates $rate --out "$out/own_links_$rate"
  "$lab" "${common[@]}" --rates $rate --out "$out/shared_link_$rate"
done

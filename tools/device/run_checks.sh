#!/usr/bin/env bash
# Part a of the GPU batch alone: build, every [gpu] test, the executor tests,
# gradcomp-parkprobe and gradcomp-kbench, logs and summary.txt in OUTDIR. See
# gpu_batch.sh.
#   tools/device/run_checks.sh OUTDIR
exec "$(dirname "${BASH_SOURCE[0]}")/gpu_batch.sh" --parts a "${1:?usage: run_checks.sh OUTDIR}"

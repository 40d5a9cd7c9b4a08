#!/usr/bin/env bash
# Install what is missing, build, and run a 4-rank allreduce benchmark on
# localhost (dense algorithm, 1M..64M floats). Extra arguments go to the bench.
# Builds only what it runs: gradcomp-bench, without tests, into build-demo/;
# the CUDA backend only where a GPU is present (nvidia-smi lists one) or
# GC_DEMO_CUDA=1 asks for it. tools/ci/test.sh builds everything in build/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DEMO_DIR="${DEMO_DIR:-$GC_ROOT/build-demo}"
cuda=OFF
if [ -x /usr/local/cuda/bin/nvcc ] &&
   { [ "${GC_DEMO_CUDA:-0}" = 1 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
  cuda=ON
fi
gc_install_missing "${GC_DEMO_PACKAGES[@]}"
cmake -G Ninja -S "$GC_ROOT" -B "$DEMO_DIR" -DGRADCOMP_CUDA="$cuda" -DGRADCOMP_TESTS=OFF >/dev/null
cmake --build "$DEMO_DIR" -j "$JOBS" --target gradcomp-bench
"$DEMO_DIR/tools/gradcomp-bench/gradcomp-bench" --ranks 4 --algo dense -b 1M -e 64M -f 4 -d float "$@"

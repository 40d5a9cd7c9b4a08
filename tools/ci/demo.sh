#!/usr/bin/env bash
# Install what is missing, build, and run a 4-rank allreduce benchmark on
# localhost (dense algorithm, 1M..64M floats). Extra arguments go to the bench.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
gc_install_missing
gc_build
"$BUILD_DIR/tools/gradcomp-bench/gradcomp-bench" --ranks 4 --algo dense -b 1M -e 64M -f 4 -d float "$@"

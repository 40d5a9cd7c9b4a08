#!/usr/bin/env bash
# Install what is missing, build, and run every test (what .ci/run runs).
# Extra arguments go to ctest (e.g. -R params).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
gc_install_missing
gc_build
# Each test also has its own TIMEOUT property; --timeout covers the rest.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600 "$@"

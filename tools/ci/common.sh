# Shared by the tools/ci scripts (sourced, not run): install what a fresh
# Debian 12 lacks, configure and build.
#   BUILD_DIR       build directory (default: build)
#   ASAN_BUILD_DIR  ASan+UBSan build, also the libFuzzer targets (default: build-asan)
#   TSAN_BUILD_DIR  TSan build (default: build-tsan)
#   JOBS            build parallelism (default: 2)
set -euo pipefail

GC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$GC_ROOT/build}"
ASAN_BUILD_DIR="${ASAN_BUILD_DIR:-$GC_ROOT/build-asan}"
TSAN_BUILD_DIR="${TSAN_BUILD_DIR:-$GC_ROOT/build-tsan}"
JOBS="${JOBS:-2}"
GC_SAN_DIR="$GC_ROOT/tools/ci/sanitizers"

GC_PACKAGES=(build-essential cmake ninja-build pkg-config libucx-dev ucx-utils libhwloc-dev
             procps  # ps, pgrep: tools/device/run_limited.sh and its test
             catch2 libopenblas-dev dataset-fashion-mnist python3-matplotlib iproute2
             zlib1g-dev libfftw3-dev libtomlplusplus-dev
             openmpi-bin  # the launchers test runs gradcomp-bench/-train under mpirun
             python3-torch  # GPU batch driver and PyTorch example on CPU/gloo (tests/device_batch.cmake)
             clang llvm libclang-rt-14-dev)  # sanitizer and libFuzzer builds

# What the demo (tools/ci/demo.sh) needs to configure and build gradcomp-bench:
# no test framework, sanitizer toolchain, MPI or PyTorch.
GC_DEMO_PACKAGES=(build-essential cmake ninja-build pkg-config libucx-dev libhwloc-dev
                  libopenblas-dev zlib1g-dev libfftw3-dev libtomlplusplus-dev)

# apt-get only for packages that are missing; sudo only when not root.
# Arguments: the packages (default: GC_PACKAGES, everything the tests need).
gc_install_missing() {
  local wanted=("$@")
  [ ${#wanted[@]} -gt 0 ] || wanted=("${GC_PACKAGES[@]}")
  local missing=()
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
}

# Debug information for the CI builds: line tables and function names only
# (g++ -g1, clang -gline-tables-only), enough for a sanitizer's or gdb's
# stacks. Full -g (RelWithDebInfo's default) made every object 2-4x larger
# and the compiles 25-30 % slower (test_collnet_plugin.cc: 15.5 s against
# 11.4 s with g++ -O2). A developer's own configure keeps -g.
GC_GCC_FLAGS="-O2 -g1 -DNDEBUG"
GC_CLANG_FLAGS="-O2 -gline-tables-only -DNDEBUG"

# CUDA is built when nvcc is present at its default location.
gc_build() {
  local cuda=OFF
  [ -x /usr/local/cuda/bin/nvcc ] && cuda=ON
  cmake -G Ninja -S "$GC_ROOT" -B "$BUILD_DIR" -DGRADCOMP_CUDA="$cuda" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$GC_GCC_FLAGS" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$GC_GCC_FLAGS" \
    -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG -Xcompiler=-g1"
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

# Sanitizer builds: clang, no CUDA. gc_build_sanitized DIR SANITIZERS [FUZZ] [targets...]
# (FUZZ: ON also builds tests/fuzz; no targets: everything).
gc_build_sanitized() {
  local dir="$1" sanitize="$2" fuzz="$3"
  shift 3
  CC=clang CXX=clang++ cmake -G Ninja -S "$GC_ROOT" -B "$dir" -DGRADCOMP_CUDA=OFF \
    -DGRADCOMP_SANITIZE="$sanitize" -DGRADCOMP_FUZZ="$fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$GC_CLANG_FLAGS" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$GC_CLANG_FLAGS" >/dev/null
  cmake --build "$dir" -j "$JOBS" ${1:+--target "$@"}
}

# Runtime options of the sanitized tests: a finding ends the process that hit
# it with a non-zero exit (a rank's exit fails its test). No abort_on_error:
# Catch2's SIGABRT handler can hang under TSan. Only third-party frames are
# suppressed.
gc_sanitizer_env() {
  export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1"
  export LSAN_OPTIONS="suppressions=$GC_SAN_DIR/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$GC_SAN_DIR/ubsan.supp"
  export TSAN_OPTIONS="halt_on_error=1:die_after_fork=0:second_deadlock_stack=1:suppressions=$GC_SAN_DIR/tsan.supp"
}

# Shared by tools/ci/demo.sh and tools/ci/test.sh (sourced, not run):
# install what a fresh Debian 12 lacks, configure and build.
#   BUILD_DIR  build directory (default: build)
#   JOBS       build parallelism (default: 2)
set -euo pipefail

GC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$GC_ROOT/build}"
JOBS="${JOBS:-2}"

GC_PACKAGES=(build-essential cmake ninja-build pkg-config libucx-dev ucx-utils libhwloc-dev
             catch2 libopenblas-dev dataset-fashion-mnist python3-matplotlib iproute2
             zlib1g-dev libfftw3-dev libtomlplusplus-dev)

# apt-get only for packages that are missing; sudo only when not root.
gc_install_missing() {
  local missing=()
  for pkg in "${GC_PACKAGES[@]}"; do
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

# CUDA is built when nvcc is present at its default location.
gc_build() {
  local cuda=OFF
  [ -x /usr/local/cuda/bin/nvcc ] && cuda=ON
  cmake -G Ninja -S "$GC_ROOT" -B "$BUILD_DIR" -DGRADCOMP_CUDA="$cuda"
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

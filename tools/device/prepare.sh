#!/usr/bin/env bash
# Run on the CPU machine (Debian 12, apt available): downloads the Debian
# packages the GPU machine lacks into .device/debs (git-ignored), so that they
# travel with the working tree. Only `apt-get download`: nothing is installed.
#   tools/device/prepare.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
debs="$root/.device/debs"
mkdir -p "$debs"
# Build and run time of gradcomp and its tests (UCX with its own runtime
# dependencies, hwloc, FFTW single, Catch2 v2, toml++, OpenBLAS, pkg-config).
packages=(
  libucx0 libucx-dev ucx-utils libnuma1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
  libhwloc15 libhwloc-dev libudev1 libxml2 libicu72
  libfftw3-single3 libfftw3-double3 libfftw3-dev
  catch2 libtomlplusplus3 libtomlplusplus-dev
  libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5
  zlib1g-dev pkgconf pkgconf-bin libpkgconf3 pkg-config
)
cd "$debs"
apt-get download "${packages[@]}"
du -sh "$debs"

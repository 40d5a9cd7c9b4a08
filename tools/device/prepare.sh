#!/usr/bin/env bash
# Run on the CPU machine (Debian 12, apt available): prepares what travels to
# the GPU machine in git-ignored folders (`carry` of the run tool):
#   .device/debs                the packages of tools/device/packages.txt
#                               (`apt-get download` only: nothing is installed)
#   .device/data/fashion-mnist  the dataset files of Debian's dataset-fashion-mnist
#   .device/prebuilt.tar.xz     with --pack: the batch's binaries built here
#                               (CUDA architecture 90), stripped and packed,
#                               so the GPU machine builds nothing (issue 31)
# Idempotent: packages already downloaded are not fetched again; .debs of
# packages no longer listed are removed.
#   tools/device/prepare.sh [--pack [BUILD_DIR]]   (BUILD_DIR default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
pack=0 pack_build="$root/build"
if [ "${1:-}" = --pack ]; then
  pack=1
  [ -z "${2:-}" ] || pack_build="$(mkdir -p "$2" && cd "$2" && pwd)"
fi
debs="$root/.device/debs"
data="$root/.device/data/fashion-mnist"
dataset=/usr/share/datasets/fashion-mnist
mkdir -p "$debs" "$data"

read -r -a packages <<<"$(grep -v '^#' "$root/tools/device/packages.txt" | tr '\n' ' ')"
# Packages no longer listed would only take carry space.
for f in "$debs"/*.deb; do
  [ -e "$f" ] || continue
  name="$(basename "$f")"
  [[ " ${packages[*]} " == *" ${name%%_*} "* ]] || { echo "prepare.sh: removing unlisted $name"; rm -f "$f"; }
done
missing=()
for p in "${packages[@]}"; do
  compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # apt's sandbox user may not write here; the download itself is the same.
  (cd "$debs" && apt-get download -o APT::Sandbox::User=root "${missing[@]}")
fi

for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [ -f "$dataset/$f" ] || { echo "prepare.sh: $dataset/$f missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
  cmp -s "$dataset/$f" "$data/$f" || cp "$dataset/$f" "$data/$f"
done
echo "prepare.sh: $(ls "$debs"/*.deb | wc -l) packages in $debs ($(du -sh "$debs" | cut -f1)), dataset in $data ($(du -sh "$data" | cut -f1))"
[ $pack = 1 ] || exit 0

# ---- the prebuilt binaries --------------------------------------------------
# What the batch runs from its build folder (gpu_batch.sh: build_targets), as
# paths relative to it. The project is linked statically into each; they need
# only the carried packages' libraries at run time.
gpu_tests="$(cd "$root/tests" && ls test_gpu_*.cc | sed 's/\.cc$//' | tr '\n' ' ')test_executor_protocol test_backend_memory"
files=(plugin/libgradcomp.so plugin/shim/lib/libnccl.so.2 tools/gradcomp-refcheck/gradcomp-refcheck
       tools/gradcomp-kbench/gradcomp-kbench tools/gradcomp-parkprobe/gradcomp-parkprobe)
for t in $gpu_tests; do files+=("tests/$t"); done
[ -f "$pack_build/build.ninja" ] || cmake -G Ninja -S "$root" -B "$pack_build" -DGRADCOMP_CUDA=ON >/dev/null
grep -q '^GRADCOMP_CUDA:BOOL=ON' "$pack_build/CMakeCache.txt" ||
  { echo "prepare.sh: $pack_build is configured without CUDA" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$pack_build" -j "${JOBS:-2}" --target gradcomp gradcomp_nccl_shim gradcomp-refcheck gradcomp-kbench \
  gradcomp-parkprobe \
  $gpu_tests
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for f in "${files[@]}"; do
  mkdir -p "$stage/$(dirname "$f")"
  strip --strip-unneeded -o "$stage/$f" "$pack_build/$f"
done
ln -s libgradcomp.so "$stage/plugin/libnccl-net-gradcomp.so"
# What it was built from: the commit and whether sources differed from it.
{
  echo "commit $(git -C "$root" rev-parse HEAD)"
  echo "dirty $(git -C "$root" status --porcelain --untracked-files=no | grep -vc '^.. docs/' || true)"
  echo "cuda_architectures $(grep -E '^CMAKE_CUDA_ARCHITECTURES:' "$pack_build/CMakeCache.txt" | cut -d= -f2)"
} >"$stage/PREBUILT"
tar -C "$stage" -cf - . | xz -6 -T0 >"$root/.device/prebuilt.tar.xz"
echo "prepare.sh: $(du -sh "$stage" | cut -f1) stripped -> .device/prebuilt.tar.xz" \
  "($(du -h "$root/.device/prebuilt.tar.xz" | cut -f1)), $(head -1 "$stage/PREBUILT")"

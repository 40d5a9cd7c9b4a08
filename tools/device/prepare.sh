#!/usr/bin/env bash
# Run on the CPU machine (Debian 12, apt available): prepares what travels to
# the GPU machine in git-ignored folders (`carry` of the run tool):
#   .device/debs                the packages of tools/device/packages.txt
#                               (`apt-get download` only: nothing is installed)
#   .device/data/fashion-mnist  the dataset files of Debian's dataset-fashion-mnist
# Idempotent: packages already downloaded are not fetched again; .debs of
# packages no longer listed are removed.
#   tools/device/prepare.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
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

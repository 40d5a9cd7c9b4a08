#!/usr/bin/env bash
# The Debian package: `cpack -G DEB` in BUILD_DIR, then
#   - Depends names the package of every library the packaged binaries need
#     (resolved with ldconfig, owned per dpkg -S), and python3;
#   - as root: dpkg -i, the installed gradcomp-bench on 2 ranks,
#     gradcomp-launch around a 2-rank NCCL application (APP), the admin file
#     /etc/gradcomp.conf read by default (malformed: a clear error), dpkg -P.
# Not root: the install part is skipped, saying so (exit 4: CTest "skipped").
# Also skipped (exit 4) when a gradcomp package is already installed or
# /etc/gradcomp.conf exists: this test never replaces an admin's.
# Usage: deb_check.sh BUILD_DIR APP
set -euo pipefail
build=$1 app=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
unset LD_LIBRARY_PATH LD_PRELOAD GRADCOMP_CONFIG GRADCOMP_RANK GRADCOMP_NRANKS GRADCOMP_BOOTSTRAP
work=$(mktemp -d)
installed_by_us=0
cleanup() {
  [ "$installed_by_us" = 1 ] && { rm -f /etc/gradcomp.conf; dpkg -P gradcomp >/dev/null 2>&1 || true; }
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(ls "$work"/out/gradcomp_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
has_dep() { tr ',' '\n' <<<"$depends" | sed -E 's/^ *//; s/ .*//' | grep -qx "$1"; }
has_dep python3 || fail "Depends lacks python3 (gradcomp-launch)"
# A package in Depends, or one that a package in Depends depends on (libopenblas0
# is satisfied by libopenblas0-pthread, which owns the library file).
covered() {
  has_dep "$1" && return 0
  for d in $(tr ',' '\n' <<<"$depends" | sed -E 's/^ *//; s/ .*//'); do
    dpkg-query -W -f='${Depends}' "$d" 2>/dev/null | tr ',|' '\n\n' | sed -E 's/^ *//; s/[ :].*//' |
      grep -qx "$1" && return 0
  done
  return 1
}

# Every NEEDED library of every packaged ELF file: shipped in the package, or
# owned by a package that Depends covers (one dpkg -S for all of them).
dpkg-deb -x "$deb" "$work/root"
needed=$(find "$work/root" -type f -exec sh -c '[ "$(head -c 4 "$1" | tail -c 3)" = ELF ] && readelf -d "$1"' _ {} \; |
         sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
libcache=$(ldconfig -p)
paths=()
for lib in $needed; do
  [ -n "$(find "$work/root" -name "$lib" -print -quit)" ] && continue
  path=$(awk -v n="$lib" '$1 == n && !p {p = $NF} END {print p}' <<<"$libcache")
  [ -n "$path" ] || fail "a packaged binary needs $lib, which this machine cannot resolve"
  paths+=("$path" "$(readlink -f "$path")")
done
[ ${#paths[@]} -gt 0 ] || fail "no NEEDED entries found in the package"
owners=$(dpkg -S "${paths[@]}" 2>/dev/null || true)  # "pkg:arch: /path" per owned path
for ((i = 0; i < ${#paths[@]}; i += 2)); do
  owner=$(awk -v a="${paths[i]}" -v b="${paths[i + 1]}" \
             '($NF == a || $NF == b) && !o {o = $1; sub(/[:,].*/, "", o)} END {print o}' <<<"$owners")
  [ -n "$owner" ] || fail "${paths[i]} belongs to no package"
  covered "$owner" || fail "the package needs ${paths[i]} from $owner, which Depends lacks"
done
echo "Depends covers the $((${#paths[@]} / 2)) libraries the packaged binaries need"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: installing the .deb (dpkg -i) needs root; the package was built and its Depends checked"
  exit 4
fi
if dpkg -s gradcomp >/dev/null 2>&1 || [ -e /etc/gradcomp.conf ]; then
  echo "SKIPPED: a gradcomp package or /etc/gradcomp.conf is already on this machine; not replacing it"
  exit 4
fi
installed_by_us=1
dpkg -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i $deb failed"; }
dpkg -S /usr/bin/gradcomp-launch /usr/bin/gradcomp-bench /usr/lib/libgradcomp.so \
  /usr/share/man/man1/gradcomp-launch.1 >/dev/null || fail "the installed package lacks files (above)"
out=$(cd "$work" && gradcomp-run -n 2 gradcomp-bench --algo dense -b 1M -e 4M -n 2 -w 1 2>&1) ||
  fail "installed gradcomp-bench on 2 ranks: $out"
grep -q "Wrong values *: 0 OK" <<<"$out" || fail "installed gradcomp-bench: $out"
mkdir "$work/x"
out=$(cd "$work" && NCCL_DOUBLE_DIR=$work/x gradcomp-launch --algo dense -- gradcomp-run -n 2 "$app" 2>&1) ||
  fail "installed gradcomp-launch: $out"
grep -q "compressed *10 " <<<"$out" || fail "installed gradcomp-launch summary: $out"
grep -q "LD_PRELOAD=/usr/lib.*/libgradcomp.so" <<<"$(gradcomp-launch --algo dense --dry-run -- true)" ||
  fail "installed gradcomp-launch does not preload the installed library"

# /etc/gradcomp.conf: read when GRADCOMP_CONFIG is unset; malformed is a clear error.
printf 'algo = "dense"\nmin_bytes = \n' >/etc/gradcomp.conf
if out=$(gradcomp-params --check 2>&1); then fail "malformed /etc/gradcomp.conf accepted: $out"; fi
grep -q "/etc/gradcomp.conf:2.*read because GRADCOMP_CONFIG is unset" <<<"$out" || fail "malformed: $out"
printf 'algo = "oktopk"\nmin_bytes = "8M"\n' >/etc/gradcomp.conf
out=$(gradcomp-params --check) || fail "valid /etc/gradcomp.conf: $out"
grep -q "algorithm oktopk.*min bytes 8388608.*config file /etc/gradcomp.conf (default admin file)" <<<"$out" ||
  fail "valid /etc/gradcomp.conf not read: $out"
out=$(GRADCOMP_CONFIG= gradcomp-params --check) || fail "GRADCOMP_CONFIG=: $out"
grep -q "algorithm off.*config file none" <<<"$out" || fail "GRADCOMP_CONFIG= still read the file: $out"
rm -f /etc/gradcomp.conf
dpkg -P gradcomp >/dev/null || fail "dpkg -P gradcomp failed"
installed_by_us=0
[ ! -e /usr/lib/libgradcomp.so ] || fail "dpkg -P left /usr/lib/libgradcomp.so"
echo "deb check: all passed ($(basename "$deb"), $(du -k "$deb" | cut -f1) KiB)"

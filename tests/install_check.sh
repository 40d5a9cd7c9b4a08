#!/usr/bin/env bash
# What an admin gets from `cmake --install BUILD --prefix STAGE`, checked with
# the installed files only (no LD_LIBRARY_PATH): the layout, what each library
# exports, the tools' RUNPATH and --help, man pages, a 2-rank gradcomp-bench,
# a program built against the install with find_package(gradcomp) and with
# pkg-config, and the shipped example config (validated uncommented).
# Usage: install_check.sh BUILD_DIR SOURCE_DIR STAGE_DIR. The staged tree stays
# for the launcher tests (CTest fixture gradcomp_staged).
set -euo pipefail
build=$1 src=$2 stage=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
unset LD_LIBRARY_PATH LD_PRELOAD GRADCOMP_RANK GRADCOMP_NRANKS GRADCOMP_BOOTSTRAP
export GRADCOMP_CONFIG=  # hermetic: not this machine's /etc/gradcomp.conf

rm -rf "$stage"
cmake --install "$build" --prefix "$stage" >/dev/null
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
lib=$stage/$libdir bin=$stage/bin

for f in "$lib/libgradcomp.so" "$lib/libgradcomp-api.so" "$lib/gradcomp/shim/libnccl.so.2" \
         "$stage/include/gradcomp/gradcomp.h" "$lib/cmake/gradcomp/gradcompConfig.cmake" \
         "$lib/cmake/gradcomp/gradcompConfigVersion.cmake" "$lib/pkgconfig/gradcomp.pc" \
         "$stage/share/doc/gradcomp/README.md" "$stage/share/doc/gradcomp/usage.md" \
         "$stage/share/doc/gradcomp/configuration.md" "$stage/share/doc/gradcomp/gradcomp.conf.example"; do
  [ -f "$f" ] || fail "missing $f"
done
# The Python package finds the installed C API by itself (gradcomp.torch needs torch).
PYTHONPATH=$stage/lib/python3/dist-packages python3 -c 'from gradcomp import capi
assert "qsgd" in capi.algorithm_names(), capi.algorithm_names()' ||
  fail "the installed Python package cannot load the installed libgradcomp-api.so"
[ "$(readlink "$lib/libnccl-net-gradcomp.so")" = libgradcomp.so ] ||
  fail "$lib/libnccl-net-gradcomp.so is not a link to libgradcomp.so"

# libgradcomp-api.so exports the C API only; libgradcomp.so none of it.
api=$(nm -D --defined-only "$lib/libgradcomp-api.so" | awk '{print $3}')
grep -qx gcAllreduce <<<"$api" || fail "libgradcomp-api.so does not export gcAllreduce"
others=$(grep -v '^gc' <<<"$api" || true)
[ -z "$others" ] || fail "libgradcomp-api.so exports more than gc*: $others"
! nm -D --defined-only "$lib/libgradcomp.so" | awk '{print $3}' | grep -q '^gc' ||
  fail "libgradcomp.so exports gc* symbols"

# Every tool: runs from the install without LD_LIBRARY_PATH, man-style --help, a man page.
tools=$(ls "$bin")
for t in gradcomp-bench gradcomp-launch gradcomp-params gradcomp-run gradcomp-sim gradcomp-train; do
  grep -qx "$t" <<<"$tools" || fail "bin/$t is not installed"
done
for t in $tools; do
  if [ "$(head -c 4 "$bin/$t" | tail -c 3)" = ELF ]; then
    readelf -d "$bin/$t" | grep -q "RUNPATH.*\$ORIGIN/../$libdir" || fail "$t has no RUNPATH \$ORIGIN/../$libdir"
    ! ldd "$bin/$t" | grep -q "not found" || fail "$t: $(ldd "$bin/$t" | grep 'not found')"
  fi
  help=$("$bin/$t" --help) || fail "$t --help exited $?"
  for section in NAME SYNOPSIS OPTIONS "EXIT STATUS"; do
    grep -qx "$section" <<<"$help" || fail "$t --help has no $section section (man-style help)"
  done
  head -1 "$stage/share/man/man1/$t.1" | grep -q "^\.TH" || fail "no man page for $t"
  grep -q '^\.SH SYNOPSIS' "$stage/share/man/man1/$t.1" || fail "$t.1 has no SYNOPSIS section"
done

# A 2-rank check with the installed tools.
out=$("$bin/gradcomp-run" -n 2 "$bin/gradcomp-bench" --algo dense -b 1M -e 1M -n 2 -w 1 -c 1 2>&1) ||
  fail "installed gradcomp-bench on 2 ranks failed: $out"
grep -q "Wrong values *: 0 OK" <<<"$out" || fail "installed gradcomp-bench: $out"

# Programs built against the install: CMake package and pkg-config.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake "${generator[@]}" -S "$src/tests/install_consumer" -B "$work/cmake" \
  -DCMAKE_PREFIX_PATH="$stage" >/dev/null || fail "find_package(gradcomp) from $stage failed"
cmake --build "$work/cmake" >/dev/null || fail "building against gradcomp::api failed"
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --variable=preload gradcomp)" = "$lib/libgradcomp.so" ] ||
  fail "pkg-config preload is $(pkg-config --variable=preload gradcomp)"
# shellcheck disable=SC2046
cc -o "$work/consumer_pc" "$src/tests/install_consumer/consumer.c" $(pkg-config --cflags --libs gradcomp) \
  -Wl,-rpath,"$(pkg-config --variable=libdir gradcomp)" || fail "building with pkg-config gradcomp failed"
for exe in "$work/cmake/consumer" "$work/consumer_pc"; do
  out=$("$bin/gradcomp-run" -n 2 "$exe" 2>&1) || fail "$exe on 2 ranks: $out"
  [ "$(grep -c 'sum 3 ok' <<<"$out")" = 2 ] || fail "$exe: $out"
done

# The example admin config: valid as shipped (changes nothing) and uncommented.
example=$stage/share/doc/gradcomp/gradcomp.conf.example
out=$(GRADCOMP_CONFIG=$example "$bin/gradcomp-params" --check) || fail "shipped example: $out"
grep -q "algorithm off" <<<"$out" || fail "the shipped example changes settings: $out"
sed -E 's/^# ((algo|comms|min_bytes|params|DENSITY) =|\[)/\1/' "$example" >"$work/uncommented.conf"
out=$(GRADCOMP_CONFIG=$work/uncommented.conf "$bin/gradcomp-params" --check 2>&1) ||
  fail "uncommented example: $out"
grep -q "algorithm oktopk.*3 rule(s)" <<<"$out" || fail "uncommented example: $out"
echo "install check: all passed ($stage)"

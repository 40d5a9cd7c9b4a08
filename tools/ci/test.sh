#!/usr/bin/env bash
# What .ci/run runs: install what is missing, build, run every test; then,
# with GC_CI_MATRIX=full (the default), the reliability matrix:
#   tools/ci/faults_full.sh  the full fault matrix (kill/stop x every algorithm, 20 s timeout)
#   tools/ci/sanitize.sh     whole suite under ASan+UBSan, threaded tests under TSan
#   tools/ci/fuzz.sh         each libFuzzer target for GC_FUZZ_SECONDS (default 10)
# The sanitizer trees build niced in the background from the start of the main
# suite (see below). GC_CI_MATRIX=quick runs only the normal build and suite. Extra arguments go
# to the normal suite's ctest (e.g. -R params). The closing line counts
# everything: "N passed, N failed"; the exit status is non-zero on any failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
matrix="${GC_CI_MATRIX:-full}"
case "$matrix" in full|quick) ;; *) echo "GC_CI_MATRIX=$matrix (accepted: full, quick)" >&2; exit 2 ;; esac

gc_install_missing
gc_build
results="$(mktemp)"
failed=0
# The sanitizer trees build at the lowest priority while the main suite and
# the fault matrix run: those tests wait on peers and timeouts much of the
# time, and at nice 19 the build takes only the CPU they leave idle (the
# scheduler gives a nice-0 process ~98 % of a core against it). Its output
# goes to a log; the sanitizer stages build again (a no-op when this
# finished) and report any build error themselves. The ASan tree comes first
# and says so through a marker file: the ASan stage starts as soon as it is
# there, while the TSan tree goes on building niced beside the ASan tests.
prebuild_pid=
asan_built="$BUILD_DIR/prebuild-asan.done"
rm -f "$asan_built"
if [ "$matrix" = full ]; then
  (
    nice -n 19 "$GC_ROOT/tools/ci/sanitize.sh" build-asan >"$BUILD_DIR/prebuild-asan.log" 2>&1 || true
    touch "$asan_built"
    nice -n 19 "$GC_ROOT/tools/ci/sanitize.sh" build-tsan >"$BUILD_DIR/prebuild-tsan.log" 2>&1
  ) &
  prebuild_pid=$!
fi
trap 'rm -f "$results"; [ -z "$prebuild_pid" ] || kill "$prebuild_pid" 2>/dev/null || true' EXIT
stage_start=$SECONDS
# Each test also has its own TIMEOUT property; --timeout covers the rest.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600 "$@" |
  tee "$BUILD_DIR/ctest-main.log" || failed=1
main_summary=$(grep -E "tests passed, [0-9]+ tests failed out of" "$BUILD_DIR/ctest-main.log" | tail -1 || true)
if [ -n "$main_summary" ]; then
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$main_summary")
  nfail=$(sed -E 's/.*tests passed, ([0-9]+) tests failed.*/\1/' <<<"$main_summary")
  echo "main suite: $((total - nfail)) passed, $nfail failed" >>"$results"
else
  echo "main suite: 0 passed, 1 failed" >>"$results"
fi
echo "[main suite: $((SECONDS - stage_start)) s]"

if [ "$matrix" = full ]; then
  for stage in "tools/ci/faults_full.sh" "tools/ci/sanitize.sh asan" "tools/ci/sanitize.sh tsan" \
               "tools/ci/fuzz.sh ${GC_FUZZ_SECONDS:-10}"; do
    if [ "$stage" = "tools/ci/sanitize.sh asan" ] && [ -n "$prebuild_pid" ]; then
      wait_start=$SECONDS
      # Bounded by the builder's life: it touches the marker or exits.
      while [ ! -e "$asan_built" ] && kill -0 "$prebuild_pid" 2>/dev/null; do sleep 2; done
      echo "[ASan tree, niced beside the suites: done $((SECONDS - wait_start)) s after the fault matrix]"
    fi
    if [ "$stage" = "tools/ci/sanitize.sh tsan" ] && [ -n "$prebuild_pid" ]; then
      wait_start=$SECONDS
      wait "$prebuild_pid" || echo "(the niced TSan build failed: the stage below builds again)"
      prebuild_pid=
      echo "[TSan tree, niced beside the ASan tests: done $((SECONDS - wait_start)) s after them]"
    fi
    stage_start=$SECONDS
    echo "==== $stage"
    # shellcheck disable=SC2086
    "$GC_ROOT"/$stage | tee -a "$results.log" || failed=1
    grep -E "^(sanitize [a-z]+|fuzz|faults full): [0-9]+ passed, [0-9]+ failed$" "$results.log" | tail -1 >>"$results" ||
      echo "$stage: 0 passed, 1 failed" >>"$results"
    rm -f "$results.log"
    echo "[$stage: $((SECONDS - stage_start)) s]"
  done
fi

echo "==== summary ($matrix matrix)"
cat "$results"
read -r passed nfailed < <(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/' "$results" |
                           awk '{p += $1; f += $2} END {print p + 0, f + 0}')
[ "$nfailed" -eq 0 ] || failed=1
echo "$passed passed, $nfailed failed"
exit "$failed"

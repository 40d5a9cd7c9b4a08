#!/usr/bin/env bash
# libFuzzer smoke runs, usable alone or from test.sh:
#   tools/ci/fuzz.sh [SECONDS] [target...]   (default 10 s each, every target)
# Builds tests/fuzz in the ASan+UBSan build (ASAN_BUILD_DIR), then runs each
# fuzz_<target> over tests/fuzz/corpus/<target> (read only: new inputs go to a
# scratch directory). Prints "fuzz <target>: N execs ..." per target and a
# closing "fuzz: N passed, N failed"; a crash leaves its input in
# $ASAN_BUILD_DIR/fuzz-artifacts/ and fails the run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-10}"
shift || true
corpus_root="$GC_ROOT/tests/fuzz/corpus"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for d in "$corpus_root"/*/; do targets+=("$(basename "$d")"); done
fi
gc_sanitizer_env
export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=1"
gc_build_sanitized "$ASAN_BUILD_DIR" address,undefined ON "${targets[@]/#/fuzz_}"

artifacts="$ASAN_BUILD_DIR/fuzz-artifacts"
scratch="$ASAN_BUILD_DIR/fuzz-scratch"
mkdir -p "$artifacts"
# One target: its exit status says whether it found nothing; its summary
# (or the finding) goes to $ASAN_BUILD_DIR/fuzz-<target>.report.
fuzz_one() {
  local t="$1" bin="$ASAN_BUILD_DIR/tests/fuzz/fuzz_$1" log="$ASAN_BUILD_DIR/fuzz-$1.log"
  local report="$ASAN_BUILD_DIR/fuzz-$1.report"
  rm -rf "${scratch:?}/$t" && mkdir -p "$scratch/$t"
  if "$bin" "$scratch/$t" "$corpus_root/$t" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
       -artifact_prefix="$artifacts/$t-" >"$log" 2>&1; then
    execs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}' || true)
    cov=$(grep -E "^#[0-9]+.*(DONE|pulse)" "$log" | tail -1 | grep -oE "cov: [0-9]+" || true)
    echo "fuzz $t: ${execs:-?} execs in ${seconds}s, ${cov:-cov: ?}, no crash" >"$report"
  else
    { echo "fuzz $t: FAILED"
      grep -E -B2 -A25 "ERROR: |property failed|runtime error|deadly signal" "$log" | head -60 || tail -40 "$log"
    } >"$report"
    return 1
  fi
}

# Each libFuzzer process uses one core: JOBS targets run at once.
pass=0 fail=0
for ((i = 0; i < ${#targets[@]}; i += JOBS)); do
  pids=()
  for t in "${targets[@]:i:JOBS}"; do fuzz_one "$t" & pids+=($!); done
  for k in "${!pids[@]}"; do
    t="${targets[$((i + k))]}"
    if wait "${pids[$k]}"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
    cat "$ASAN_BUILD_DIR/fuzz-$t.report"
  done
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

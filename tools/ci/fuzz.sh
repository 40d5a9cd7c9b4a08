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
pass=0 fail=0
for t in "${targets[@]}"; do
  bin="$ASAN_BUILD_DIR/tests/fuzz/fuzz_$t"
  log="$ASAN_BUILD_DIR/fuzz-$t.log"
  rm -rf "$scratch/$t" && mkdir -p "$scratch/$t"
  if "$bin" "$scratch/$t" "$corpus_root/$t" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
       -artifact_prefix="$artifacts/$t-" >"$log" 2>&1; then
    pass=$((pass + 1))
    execs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}' || true)
    cov=$(grep -E "^#[0-9]+.*(DONE|pulse)" "$log" | tail -1 | grep -oE "cov: [0-9]+" || true)
    echo "fuzz $t: ${execs:-?} execs in ${seconds}s, ${cov:-cov: ?}, no crash"
  else
    fail=$((fail + 1))
    echo "fuzz $t: FAILED"
    grep -E -B2 -A25 "ERROR: |property failed|runtime error|deadly signal" "$log" | head -60 || tail -40 "$log"
  fi
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env bash
# The full fault matrix (GC_CI_MATRIX=full; the default CTest run has the
# small one): every algorithm x {SIGKILL, SIGSTOP} with GRADCOMP_TIMEOUT_S=20
# and 4 ranks, through the algorithms directly (over TCP and shared memory)
# and through the NCCL interposer; 8 cells at a time. A killed rank must be
# found in under 5 s, a stopped one in under 23.5 s, by every survivor, with
# the failed rank named (tests/test_faults_matrix.cc, test_faults_interposer.cc).
# Uses the normal build (BUILD_DIR); prints "faults full: N passed, N failed".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
pass=0 fail=0
for t in test_faults_matrix test_faults_interposer; do
  log="$BUILD_DIR/$t.full.log" rc=0
  GC_TEST_BINARY_DIR="$BUILD_DIR" timeout 900 "$BUILD_DIR/tests/$t" "[full]" >"$log" 2>&1 || rc=$?
  line=$(grep -E "^(All tests passed|test cases:)" "$log" | tail -1 || true)
  if [[ "$line" =~ in\ ([0-9]+)\ test\ case ]]; then p=${BASH_REMATCH[1]} f=0
  elif [[ "$line" =~ \|\ *([0-9]+)\ passed\ *\|\ *([0-9]+)\ failed ]]; then p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
  else p=0 f=1; fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  pass=$((pass + p)); fail=$((fail + f))
  grep -E "^(faults|interposer faults):" "$log" || true
  echo "faults full $t: $p passed, $f failed (exit $rc)"
  [ "$rc" -eq 0 ] || grep -E -B2 -A12 "problem:|FAILED" "$log" | head -80 || tail -40 "$log"
done
echo "faults full: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

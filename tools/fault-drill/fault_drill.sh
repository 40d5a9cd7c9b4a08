#!/usr/bin/env bash
# The operator's failure drill: N local ranks of gradcomp-bench started the way
# a launcher (torchrun, srun) starts them, one rank hit by a signal after a
# delay; prints when each survivor exited (seconds after the signal), its exit
# code and the last line it wrote to stderr.
#
#   tools/fault-drill/fault_drill.sh [-a ALGO] [-n RANKS] [-r VICTIM] [-s KILL|STOP]
#                                    [-d DELAY_S] [-t TIMEOUT_S] [-b BUILD_DIR] [-m MAX_S]
# Defaults: dense, 4 ranks, victim 2, KILL, 8 s, GRADCOMP_TIMEOUT_S=20, build/,
# survivors still running MAX_S (300) seconds after the signal are reported
# and killed. Extra environment (UCX_TLS, GRADCOMP_UCX_ERR_MODE, ...) passes
# through.
set -euo pipefail
ALGO=dense NRANKS=4 VICTIM=2 SIG=KILL DELAY=8 TIMEOUT=20 MAX=300
BUILD="$(cd "$(dirname "$0")/../.." && pwd)/build"
while getopts "a:n:r:s:d:t:b:m:" opt; do
  case $opt in
    a) ALGO=$OPTARG ;; n) NRANKS=$OPTARG ;; r) VICTIM=$OPTARG ;; s) SIG=$OPTARG ;;
    d) DELAY=$OPTARG ;; t) TIMEOUT=$OPTARG ;; b) BUILD=$OPTARG ;; m) MAX=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
BENCH="$BUILD/tools/gradcomp-bench/gradcomp-bench"
[ -x "$BENCH" ] || { echo "no $BENCH (build first)" >&2; exit 2; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
OUT=$(mktemp -d /tmp/gc_drill_XXXXXX)
now() { date +%s.%N; }

# Each rank runs under a small watcher that records its exit code and time.
for ((r = 0; r < NRANKS; ++r)); do
  (
    GRADCOMP_RANK=$r GRADCOMP_NRANKS=$NRANKS GRADCOMP_BOOTSTRAP=127.0.0.1:$PORT \
    GRADCOMP_TIMEOUT_S=$TIMEOUT \
      "$BENCH" --algo "$ALGO" -b 64M -e 64M -d float -w 1 -n 100000 -c 0 \
      >"$OUT/out$r" 2>"$OUT/err$r" &
    echo $! >"$OUT/pid$r"
    code=0
    wait $! || code=$?
    echo "$code $(now)" >"$OUT/exit$r"
  ) &
done
sleep "$DELAY"
victim=$(cat "$OUT/pid$VICTIM")
kill -s "$SIG" "$victim"
t0=$(now)
echo "drill: $ALGO, $NRANKS ranks, rank $VICTIM got SIG$SIG after ${DELAY}s, GRADCOMP_TIMEOUT_S=$TIMEOUT"
for ((r = 0; r < NRANKS; ++r)); do
  [ "$r" -eq "$VICTIM" ] && continue
  while [ ! -s "$OUT/exit$r" ] && [ "$(echo "$(now) - $t0 < $MAX" | bc)" -eq 1 ]; do sleep 0.1; done
  if [ ! -s "$OUT/exit$r" ]; then
    echo "rank $r: still running ${MAX} s after the signal; killed"
    kill -s KILL "$(cat "$OUT/pid$r")" 2>/dev/null || true
  fi
done
kill -s KILL "$victim" 2>/dev/null || true
wait
for ((r = 0; r < NRANKS; ++r)); do
  [ "$r" -eq "$VICTIM" ] && continue
  [ -s "$OUT/exit$r" ] || sleep 0.5
  read -r code t <"$OUT/exit$r"
  printf 'rank %d: exit %d after %.1f s; last stderr line: %s\n' "$r" "$code" \
    "$(echo "$t - $t0" | bc)" "$(tail -n 1 "$OUT/err$r")"
done
echo "drill: full logs in $OUT"

#!/usr/bin/env bash
# Runs a command with a time limit; one that reaches it leaves the stacks of
# every thread of every process it started before it is killed (the GPU
# batch's steps: a hang must say where it hung, issue 31).
#
#   tools/device/run_limited.sh LIMIT_S STACKS_FILE CMD...
#
# The command runs in a session of its own (setsid), so its rank processes,
# torchrun's workers included, are found and killed together. At the limit,
# for each process of the session: `cuda-gdb` (else `gdb`) -batch
# -ex "thread apply all bt" -p PID, bounded; and always, from /proc, every
# thread's name, state, wchan and kernel stack (readable as root). Then
# SIGTERM to the session, SIGKILL 5 s later. Exit status: the command's, or
# 124 when it reached the limit (as timeout(1)).
set -uo pipefail
limit="${1:?limit}" stacks="${2:?stacks file}"
shift 2
[ $# -gt 0 ] || { echo "run_limited.sh: no command" >&2; exit 2; }

setsid "$@" &
pid=$!
deadline=$((SECONDS + limit))
while kill -0 "$pid" 2>/dev/null; do
  if [ $SECONDS -ge $deadline ]; then
    break
  fi
  sleep 0.2
done
if ! kill -0 "$pid" 2>/dev/null; then
  wait "$pid"
  exit $?
fi

# The session's processes (the leader's session id is its pid).
procs() { ps -e -o pid=,sid= | awk -v s="$pid" '$2 == s {print $1}'; }
debugger=""
for d in cuda-gdb gdb; do
  command -v "$d" >/dev/null && { debugger="$d"; break; }
done
{
  echo "== $(date -u +%FT%TZ): reached the limit of $limit s: $*"
  for p in $(procs); do
    echo "== process $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-300)"
    grep -E '^(State|Threads):' /proc/"$p"/status 2>/dev/null
    for t in /proc/"$p"/task/*; do
      [ -d "$t" ] || continue
      echo "-- thread ${t##*/} ($(cat "$t"/comm 2>/dev/null)): $(awk '{print $3}' "$t"/stat 2>/dev/null)," \
        "wchan $(cat "$t"/wchan 2>/dev/null || echo ?)"
      sed 's/^/     /' "$t"/stack 2>/dev/null
    done
    if [ -n "$debugger" ]; then
      echo "-- $debugger: thread apply all bt"
      timeout -k 5 30 "$debugger" -batch -ex "thread apply all bt" -p "$p" 2>&1 | grep -v '^\[New LWP'
    fi
  done
} >"$stacks" 2>&1
kill -TERM -- -"$pid" 2>/dev/null
for _ in $(seq 25); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
kill -KILL -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit 124

#!/usr/bin/env bash
# netlab.sh: an emulated cluster on one machine. Builds N network namespaces
# (the "hosts") on one bridge that lives in a namespace of its own, so the
# machine's own network is never touched; shapes every link in both directions
# with tc; runs a command; tears everything down afterwards, also after a
# failure or a signal (trap). Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN).
#
#   netlab.sh [options] --ranks -- CMD ARGS...   one CMD per host, as gradcomp ranks
#   netlab.sh [options] -- CMD ARGS...           CMD once, in the caller's namespace,
#                                                with the lab described by NETLAB_* vars
# Options:
#   -n N          hosts (2..64, default 2)
#   --rate R      link rate, tc syntax: 1gbit, 10gbit, 500mbit (default 1gbit; 0 = unshaped)
#   --delay D     one-way delay added per link direction with netem, e.g. 50us (default none)
#   --timeout S   kill CMD after S seconds (default 600)
#   --launcher P  gradcomp-run to start the ranks with (default: next to gradcomp-bench
#                 in $NETLAB_BUILD/tools, else gradcomp-run in PATH)
#
# Topology: host i is namespace ${NETLAB_PREFIX}$i with eth0 = 10.77.0.(i+1)/24;
# its veth peer p$i is a port of bridge br0 in namespace ${NETLAB_PREFIX}br. The
# egress of eth0 (what host i sends) and of p$i (what it receives) are each
# limited to R, so every host has a full-duplex link of rate R to a non-blocking
# switch. The subnet is private to this run's namespaces; names carry the pid.
#
# --ranks reuses gradcomp's launcher (tools/launch via gradcomp-run): it starts N
# copies of rank-exec.sh, which enters namespace $GRADCOMP_RANK and execs CMD with
# GRADCOMP_BOOTSTRAP=10.77.0.1:$NETLAB_PORT (rank 0's listener), UCX_TLS=tcp and
# UCX_NET_DEVICES=eth0. Exit status: CMD's (the first failing rank's), 3 when
# namespaces cannot be created (e.g. no permission), 2 for a usage error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nhosts=2 rate=1gbit delay="" timeout_s=600 per_rank=0 launcher=""
usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die_usage() { echo "netlab: $*" >&2; exit 2; }

while (($#)); do
  case "$1" in
    -n) nhosts=${2:?-n needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --delay) delay=${2:?--delay needs a value}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    --launcher) launcher=${2:?--launcher needs a value}; shift 2 ;;
    --ranks) per_rank=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die_usage "unknown option '$1' (see --help)" ;;
  esac
done
(($# > 0)) || die_usage "missing the command to run after --"
if [[ ! $nhosts =~ ^[0-9]+$ ]] || ((nhosts < 2 || nhosts > 64)); then
  die_usage "-n: expected 2..64 hosts, got '$nhosts'"
fi
[[ $timeout_s =~ ^[0-9]+$ ]] || die_usage "--timeout: expected seconds, got '$timeout_s'"
[[ $rate =~ ^(0|[0-9]+(bit|kbit|mbit|gbit))$ ]] || die_usage "--rate: expected e.g. 1gbit, 10gbit, 500mbit or 0, got '$rate'"
[[ -z $delay || $delay =~ ^[0-9.]+(us|ms|s)$ ]] || die_usage "--delay: expected e.g. 100us or 1ms, got '$delay'"

prefix="gcl$$-"
bridge_ns="${prefix}br"
created=()  # namespaces to delete, in creation order

child=""
# Stops what is still running inside this run's namespaces (by pid: only
# processes that entered them, i.e. ours), then deletes the namespaces.
teardown() {
  local ns pids
  set +e
  [[ -n $child ]] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  for ns in "${created[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
    ip netns delete "$ns" 2>/dev/null || true
  done
  created=()
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Rate in bytes/s, for the token bucket: tc accepts e.g. 1gbit, we need numbers.
rate_bytes() {
  local r=$1 n unit
  n=${r%%[a-z]*}; unit=${r#"$n"}
  case $unit in
    bit) echo $((n / 8)) ;; kbit) echo $((n * 1000 / 8)) ;;
    mbit) echo $((n * 1000000 / 8)) ;; gbit) echo $((n * 1000000000 / 8)) ;;
  esac
}

# Shapes the egress of device $2 in namespace $1. The bucket holds 4 ms of
# traffic (at least 256 KiB: veth hands tbf 64 KiB GSO segments, and a bucket
# smaller than one segment would drop everything).
shape() {
  local ns=$1 dev=$2 burst parent="root"
  if [[ -n $delay ]]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000
    parent="parent 1:"
  fi
  [[ $rate == 0 ]] && return 0
  burst=$(($(rate_bytes "$rate") / 250))
  ((burst >= 262144)) || burst=262144
  # shellcheck disable=SC2086
  ip netns exec "$ns" tc qdisc add dev "$dev" $parent handle 2: tbf rate "$rate" burst "$burst" latency 100ms
}

make_ns() {
  local err
  if ! err=$(ip netns add "$1" 2>&1); then
    echo "netlab: cannot create network namespace $1: $err" >&2
    if [[ $err == *"File exists"* ]]; then
      echo "netlab: a namespace of that name is left over from a killed run: ip netns delete $1" >&2
      exit 1
    fi
    echo "netlab: the lab needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and a kernel with network namespaces" >&2
    exit 3
  fi
  created+=("$1")
  ip -n "$1" link set lo up
}

make_ns "$bridge_ns"
ip -n "$bridge_ns" link add br0 type bridge
ip -n "$bridge_ns" link set br0 up
hosts=()
for ((i = 0; i < nhosts; ++i)); do
  ns="${prefix}$i"
  make_ns "$ns"
  ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$bridge_ns"
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$bridge_ns" link set "p$i" master br0
  ip -n "$bridge_ns" link set "p$i" up
  shape "$ns" eth0
  shape "$bridge_ns" "p$i"
  hosts+=("10.77.0.$((i + 1))")
done
# Links up before the command starts (bounded: 5 s). The bootstrap itself
# retries a refused connection, so this only catches a broken setup early.
for ((i = 0; i < nhosts; ++i)); do
  for ((try = 0; try < 50; ++try)); do
    [[ $(ip netns exec "${prefix}$i" cat /sys/class/net/eth0/operstate) == up ]] && break
    sleep 0.1
  done
  ((try < 50)) || { echo "netlab: eth0 of host $i did not come up" >&2; exit 1; }
done

export NETLAB_PREFIX=$prefix NETLAB_NHOSTS=$nhosts NETLAB_RATE=$rate NETLAB_DELAY=$delay
export NETLAB_HOSTS="${hosts[*]}" NETLAB_SUBNET=10.77.0.0/24 NETLAB_DEV=eth0
export NETLAB_PORT=$((20000 + $$ % 20000)) NETLAB_DIR=$here
echo "netlab: $nhosts hosts ${prefix}0..$((nhosts - 1)) at ${rate}${delay:+ delay $delay} on 10.77.0.0/24" >&2

# The command runs in the background and the script waits for it, so that a
# signal to this script runs the trap (teardown) at once instead of after it.
set +e
if ((per_rank)); then
  if [[ -z $launcher ]]; then
    if [[ -n ${NETLAB_BUILD:-} && -x $NETLAB_BUILD/tools/gradcomp-run/gradcomp-run ]]; then
      launcher=$NETLAB_BUILD/tools/gradcomp-run/gradcomp-run
    else
      launcher=gradcomp-run
    fi
  fi
  command -v "$launcher" >/dev/null ||
    { echo "netlab: launcher '$launcher' not found: set NETLAB_BUILD=<build dir> or --launcher PATH" >&2; exit 2; }
  timeout -k 5 "$timeout_s" "$launcher" -n "$nhosts" -- "$here/rank-exec.sh" "$@" &
else
  timeout -k 5 "$timeout_s" "$@" &
fi
child=$!
wait "$child"
rc=$?
child=""
set -e
((rc == 124)) && echo "netlab: the command ran past --timeout $timeout_s s and was killed" >&2
exit "$rc"

#!/usr/bin/env bash
# rank-exec.sh CMD ARGS...: the per-rank command netlab.sh --ranks hands to
# gradcomp-run. gradcomp-run set GRADCOMP_RANK/NRANKS (and a loopback
# GRADCOMP_BOOTSTRAP=127.0.0.1:PORT); netlab.sh exported NETLAB_*. Enters host
# $GRADCOMP_RANK's namespace and execs CMD there with rank 0's listener moved to
# host 0's lab address (same PORT: free on the host, fresh per launch, so a
# previous job's TIME_WAIT sockets never block it), UCX restricted to tcp on
# the emulated link (with several ranks per host, shared memory inside a host:
# gradcomp connects peers on other hosts through their network-only address). `ip netns exec` execs CMD in
# place, so the launcher's signals and exit status reach CMD directly.
set -euo pipefail
: "${GRADCOMP_RANK:?rank-exec.sh runs under gradcomp-run (GRADCOMP_RANK is unset)}"
: "${NETLAB_PREFIX:?rank-exec.sh runs under netlab.sh --ranks (NETLAB_PREFIX is unset)}"
first_host=${NETLAB_HOSTS%% *}
port=${GRADCOMP_BOOTSTRAP##*:}
[[ $port =~ ^[0-9]+$ ]] || port=$NETLAB_PORT
export GRADCOMP_BOOTSTRAP="$first_host:$port"
# NETLAB_RANKS_PER_HOST=L (gradcomp-lab --ranks-per-host): ranks L*h .. L*h+L-1
# share host h's namespace and name it as their host (GRADCOMP_HOSTID); their
# traffic to each other stays inside it over shared memory, unshaped, as on a
# real host (GRADCOMP_NET_BETWEEN_HOSTS keeps other hosts on eth0's tcp).
# NETLAB_OWN_LINKS=1 (gradcomp-lab --own-links): every rank keeps a namespace
# and link of its own (a NIC per GPU) and only GRADCOMP_HOSTID groups L of them
# into a host; shared memory joins them (one kernel), as NVLink would.
per_host=${NETLAB_RANKS_PER_HOST:-1}
default_tls=tcp
((per_host == 1)) || default_tls=sm,tcp,self
export UCX_TLS=${NETLAB_UCX_TLS:-$default_tls} UCX_NET_DEVICES=$NETLAB_DEV
host=$((GRADCOMP_RANK / per_host))
((per_host == 1)) || export GRADCOMP_HOSTID="netlab-host$host"
ns=$host
[[ ${NETLAB_OWN_LINKS:-0} == 1 ]] && ns=$GRADCOMP_RANK
exec ip netns exec "${NETLAB_PREFIX}${ns}" "$@"

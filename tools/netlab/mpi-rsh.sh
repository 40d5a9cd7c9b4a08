#!/usr/bin/env bash
# mpi-rsh.sh [ssh-style options] HOST COMMAND...: Open MPI's remote-start agent
# for the lab (mpirun --mca plm_rsh_agent .../mpi-rsh.sh). HOST is a lab address
# 10.77.0.(i+1); the command (one shell string, as ssh would pass it) runs in
# namespace ${NETLAB_PREFIX}i. Any other host is refused: the lab never starts
# anything outside its own namespaces.
set -euo pipefail
: "${NETLAB_PREFIX:?mpi-rsh.sh runs under netlab.sh (NETLAB_PREFIX is unset)}"
while (($#)) && [[ $1 == -* ]]; do shift; done  # ssh options mpirun may add (-x, -n)
host=${1:?mpi-rsh.sh: missing the host}
shift
if [[ ! $host =~ ^10\.77\.0\.([0-9]+)$ ]] || ((BASH_REMATCH[1] < 1 || BASH_REMATCH[1] > NETLAB_NHOSTS)); then
  echo "mpi-rsh.sh: '$host' is not a host of this lab (${NETLAB_HOSTS:-})" >&2
  exit 255
fi
exec ip netns exec "${NETLAB_PREFIX}$((BASH_REMATCH[1] - 1))" /bin/sh -c "$*"

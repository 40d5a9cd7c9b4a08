#!/usr/bin/env bash
# mpi-run.sh ALGO [mpi_allreduce_bench args...]: runs the Open MPI baseline
# across the lab (call it under netlab.sh, which exports NETLAB_*). ALGO is
# `ring` (coll_tuned_allreduce_algorithm 4 and, for -g (MPI_Allgather),
# coll_tuned_allgather_algorithm 4, forced through dynamic rules),
# `default` (Open MPI's own choice for the size and P), or for -r
# (MPI_Reduce_scatter_block) `halving` / `butterfly`
# (coll_tuned_reduce_scatter_block_algorithm 3 / 4). One rank per host, TCP
# only on the lab subnet. Prints mpi_allreduce_bench's JSON lines, each with
# "algo" added. The bench is compiled with mpicc on first use into
# $NETLAB_MPI_BUILD (default /tmp/netlab-mpi-$UID).
set -euo pipefail
: "${NETLAB_PREFIX:?mpi-run.sh runs under netlab.sh (NETLAB_PREFIX is unset)}"
algo=${1:?usage: mpi-run.sh ring|default|halving|butterfly [-n ITERS] [-w WARMUP] [-r|-g] SIZE...}
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case $algo in
  ring) rules=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
              --mca coll_tuned_allgather_algorithm 4) ;;
  default) rules=() ;;
  halving|butterfly)
    rules=(--mca coll_tuned_use_dynamic_rules 1
           --mca coll_tuned_reduce_scatter_block_algorithm "$([[ $algo == halving ]] && echo 3 || echo 4)") ;;
  *) echo "mpi-run.sh: algorithm '$algo' is not known: expected ring, default, halving or butterfly" >&2
     exit 2 ;;
esac
command -v mpicc >/dev/null || { echo "mpi-run.sh: mpicc not found: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 3; }
build=${NETLAB_MPI_BUILD:-/tmp/netlab-mpi-$UID}
mkdir -p "$build"
bench=$build/mpi_allreduce_bench
if [[ ! -x $bench || $here/mpi_allreduce_bench.c -nt $bench ]]; then
  mpicc -O2 -std=c11 -Wall -o "$bench.tmp$$" "$here/mpi_allreduce_bench.c"
  mv "$bench.tmp$$" "$bench"
fi
hostfile=$build/hosts.$$
trap 'rm -f "$hostfile"' EXIT
for h in $NETLAB_HOSTS; do echo "$h slots=1"; done >"$hostfile"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun itself runs on host 0, so its own daemon-to-daemon traffic stays on the lab too.
ip netns exec "${NETLAB_PREFIX}0" mpirun --allow-run-as-root -np "$NETLAB_NHOSTS" \
  --hostfile "$hostfile" --map-by node --bind-to none \
  --mca plm_rsh_agent "$here/mpi-rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl tcp,self --mca btl_tcp_if_include "$NETLAB_SUBNET" \
  --mca oob_tcp_if_include "$NETLAB_SUBNET" --mca pml ob1 \
  "${rules[@]}" "$bench" "$@" |
  sed -u "s/^{\"impl\": \"mpi\"/{\"impl\": \"mpi\", \"algo\": \"$algo\"/"

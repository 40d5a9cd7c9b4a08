#!/usr/bin/env bash
# Worker wrapper for torch.distributed.run --no_python: gives each rank its own
# NCCL_HOSTID, so that NCCL treats the ranks sharing one GPU as separate hosts
# (no "Duplicate GPU detected"; they talk through the NET transport).
#   python3 -m torch.distributed.run --nproc_per_node 4 --no_python tools/device/rank_env.sh python3 SCRIPT ...
export NCCL_HOSTID="gradcomp-rank${RANK:?rank_env.sh: RANK unset (run it under torch.distributed.run)}"
exec "$@"

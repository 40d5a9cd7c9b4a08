"""gradcomp as a PyTorch DDP communication hook.

    import gradcomp.torch
    state = gradcomp.torch.GradcompState()          # collective: every rank
    model.register_comm_hook(state, gradcomp.torch.allreduce_hook)

Each gradient bucket is averaged by gradcomp's library (libgradcomp-api.so,
through ctypes) with the configuration the NCCL interposer reads: defaults,
the admin file (GRADCOMP_CONFIG, else /etc/gradcomp.conf), GRADCOMP_*
variables (GRADCOMP_ALGO, GRADCOMP_MIN_BYTES, the algorithms' parameters),
decided per bucket by the library (gcCommPolicyConfig), compared across ranks
by GradcompState(). GradcompState(algo=..., params=...) overrides the
algorithm and its parameters for this hook instead (compared across ranks
through the store). With GRADCOMP_STATS=PREFIX each process writes
PREFIX.hook.rank<R>.json, the interposer's stats format (gradcomp.stats), which
gradcomp-launch summarizes.

The ranks meet through the process group's own store (torchrun's, or the
store of init_process_group; state's `store` argument for another): rank 0
opens gradcomp's listener and publishes its address there, so no
GRADCOMP_RANK / GRADCOMP_BOOTSTRAP is needed.

What passes through to the process group's own allreduce (each reason logged
once): CUDA buckets (the library's C API runs on the CPU backends only),
dtypes the library does not compress (anything but float32, float16,
bfloat16), and what the configuration leaves alone (GRADCOMP_ALGO=off,
buckets under GRADCOMP_MIN_BYTES). A gradcomp failure raises GradcompError
naming the cause, from the backward pass, on every rank: the library agrees
failures across ranks within a call (GRADCOMP_TIMEOUT_S bounds a lost peer).

Works with PyTorch 1.13 and 2.x (GradBucket.buffer()/index(), Store.wait,
torch.futures.Future).
"""
import datetime
import itertools
import logging
import os
import socket
import time

import torch
import torch.distributed as dist

from gradcomp import capi
from gradcomp import stats as _stats
from gradcomp.capi import GradcompError

__all__ = ["GradcompState", "allreduce_hook", "GradcompError"]

log = logging.getLogger("gradcomp.torch")

# torch dtype -> gcDataType_t for the dtypes the library takes; others pass
# through before the library is asked.
_DTYPES = {
    torch.float32: capi.FLOAT32, torch.float16: capi.FLOAT16, torch.bfloat16: capi.BFLOAT16,
    torch.float64: capi.FLOAT64, torch.int32: capi.INT32, torch.int64: capi.INT64,
}
_states = {}  # group leader's global rank -> states made here for groups it leads


def _leader(process_group):
    """Global rank of the group's rank 0 (part of the store key: two groups'
    states never meet under one key)."""
    if process_group is None:
        return 0
    for name in ("get_global_rank", "_get_global_rank"):  # 2.x, 1.13
        fn = getattr(dist.distributed_c10d, name, None)
        if fn is not None:
            return fn(process_group, 0)
    return 0


def _default_host():
    """Where rank 0 listens: MASTER_ADDR (torchrun and most launchers set it
    to rank 0's host), else this host's name."""
    return os.environ.get("MASTER_ADDR") or socket.gethostname()


def _timeout_s():
    try:
        return float(os.environ.get("GRADCOMP_TIMEOUT_S", "60")) * 2 + 30
    except ValueError:
        return 150.0  # the library rejects the value with its name at init


class GradcompState:
    """The hook's communicator (collective: every rank of the group makes one,
    in the same order). process_group: the group DDP runs on (default: the
    default group); store: where ranks meet (default: the default group's
    store, under a prefix of this state); host: where rank 0 listens
    (default: MASTER_ADDR, else this host's name); algo/params: the algorithm
    and its parameters (names without GRADCOMP_) for every bucket, instead of
    the configuration's per-bucket decision; dense_steps: the first steps
    pass through to the group's allreduce (a dense warm-up, as 1-bit Adam
    runs one before it compresses)."""

    def __init__(self, process_group=None, algo=None, params=None, store=None, host=None,
                 dense_steps=0):
        if not dist.is_available() or not dist.is_initialized():
            raise GradcompError(1, "gradcomp.torch: no process group: call "
                                   "torch.distributed.init_process_group first")
        self.process_group = process_group
        self.rank = dist.get_rank(process_group)
        self.size = dist.get_world_size(process_group)
        if store is None:
            try:
                store = dist.distributed_c10d._get_default_store()
            except Exception as e:  # noqa: BLE001  (the message names the cause)
                raise GradcompError(1, "gradcomp.torch: the process group has no store to meet "
                                       "through (%s); pass GradcompState(store=...)" % e) from e
            if store is None:  # an MPI process group keeps none
                raise GradcompError(1, "gradcomp.torch: the process group (backend %s) has no store "
                                       "to meet through; pass GradcompState(store=...), e.g. a "
                                       "torch.distributed.TCPStore or FileStore every rank reaches"
                                       % dist.get_backend(process_group))
        leader = _leader(process_group)
        key = "gradcomp/hook/%d/%d" % (leader, _states.setdefault(leader, itertools.count()).__next__())
        self._store = dist.PrefixStore(key, store)
        self.algo = algo
        self.dense_steps = int(dense_steps)
        self._agree(algo, params)
        start = time.perf_counter()
        self.comm = self._rendezvous(host or _default_host())
        self._fixed = capi.AlgoConfig(algo, params) if algo else None
        if self._fixed is None:  # the library compares the configuration across ranks (collective)
            self.comm.policy_config(0, capi.FLOAT32, capi.AVG)
        self._record = _stats.CommStats(self.rank, self.size, dist.get_rank())
        self._record.wiring_seconds = time.perf_counter() - start
        self._decisions = {}  # (count, dtype) -> (AlgoConfig or None, why)
        self._logged = set()
        self.step = 0  # DDP steps seen (a bucket with is_last() ends one)
        self.stats = {"calls": 0, "compressed_calls": 0, "compressed_bytes": 0,
                      "passthrough_calls": 0, "passthrough_bytes": 0, "passthrough": {},
                      "algorithms": {}}

    def _agree(self, algo, params):
        """Every rank's algo, params and dense_steps must be equal (a rank that
        compresses a bucket that another passes to gloo would wait for it until a
        timeout): compared through the store before any communicator exists, the
        same verdict on every rank, in the words of the library's configuration
        check (key 'K' is 'A' on rank 0 but 'B' on rank R)."""
        mine = {"algo": algo or "(the configuration's, per bucket)", "dense_steps": str(self.dense_steps)}
        mine.update(("params." + str(k), str(v)) for k, v in (params or {}).items())
        text = "\n".join("%s=%s" % kv for kv in sorted(mine.items()))
        keys = ["settings/%d" % r for r in range(self.size)]
        self._store.set(keys[self.rank], text)
        try:
            self._store.wait(keys, datetime.timedelta(seconds=_timeout_s()))
        except Exception as e:  # noqa: BLE001
            raise GradcompError(5, "gradcomp.torch: rank %d waited %.0f s for every rank's GradcompState "
                                   "in the store (a rank that makes none, or makes them in another "
                                   "order): %s" % (self.rank, _timeout_s(), e)) from e
        texts = [dict(line.split("=", 1) for line in self._store.get(k).decode().split("\n"))
                 for k in keys]
        for r, other in enumerate(texts[1:], 1):
            for k in sorted(set(texts[0]) | set(other)):
                a, b = texts[0].get(k, "<unset>"), other.get(k, "<unset>")
                if a != b:
                    raise GradcompError(2, "gradcomp.torch: GradcompState differs across ranks: key "
                                           "'%s' is '%s' on rank 0 but '%s' on rank %d (every rank "
                                           "must pass the same algo, params and dense_steps)"
                                        % (k, a, b, r))

    def _rendezvous(self, host):
        timeout = datetime.timedelta(seconds=_timeout_s())
        if self.rank == 0:
            try:
                uid = capi.Comm.unique_id(host)
            except GradcompError as e:
                self._store.set("id", "error:" + str(e))  # the others fail too, naming it
                raise
            self._store.set("id", uid)
        else:
            try:
                self._store.wait(["id"], timeout)
            except Exception as e:  # noqa: BLE001
                raise GradcompError(5, "gradcomp.torch: rank %d waited %.0f s for rank 0's gradcomp "
                                       "address in the store: %s" % (self.rank, _timeout_s(), e)) from e
            uid = self._store.get("id").decode()
            if uid.startswith("error:"):
                raise GradcompError(4, "gradcomp.torch: rank 0 could not open gradcomp's "
                                       "rendezvous: " + uid[len("error:"):])
        return capi.Comm(self.size, self.rank, uid)

    def _log_once(self, what, message, *args):
        if what not in self._logged:
            self._logged.add(what)
            log.warning("gradcomp.torch (rank %d): " + message, self.rank, *args)

    def _decide(self, count, dtype):
        """(AlgoConfig or None, why) for a bucket: the same on every rank."""
        key = (count, dtype)
        if key not in self._decisions:
            if self._fixed is not None and dtype in (capi.FLOAT32, capi.FLOAT16, capi.BFLOAT16):
                self._decisions[key] = (self._fixed, "compress")
            elif self._fixed is not None:
                self._decisions[key] = (None, "data type not f32/f16/bf16")
            else:
                self._decisions[key] = self.comm.policy_config(count, dtype, capi.AVG)
        return self._decisions[key]

    def _passthrough(self, tensor, why):
        self._log_once(why, "buckets pass through to the process group's allreduce: %s", why)
        self._record.passed(tensor.numel() * tensor.element_size(), why)
        self.stats["passthrough_calls"] += 1
        self.stats["passthrough_bytes"] += tensor.numel() * tensor.element_size()
        self.stats["passthrough"][why] = self.stats["passthrough"].get(why, 0) + 1
        size = self.size

        def average(fut):
            t = fut.value()[0]
            if t.is_floating_point() or t.is_complex():
                return t.div_(size)
            return t.div_(size, rounding_mode="trunc")

        work = dist.all_reduce(tensor, group=self.process_group, async_op=True)
        return work.get_future().then(average)

    def traffic(self):
        """Bytes and messages this rank's gradcomp communicator sent and received."""
        return self.comm.traffic()

    def close(self):
        """Collective: releases the communicator (every rank, after the last step)
        and writes the stats file (GRADCOMP_STATS)."""
        try:
            self.comm.destroy()
        finally:
            _stats.write()


def allreduce_hook(state, bucket):
    """DDP communication hook: averages the bucket with gradcomp, in place,
    and returns a completed future holding it."""
    if state is None:
        raise GradcompError(1, "gradcomp.torch.allreduce_hook: the state is None; register "
                               "gradcomp.torch.GradcompState() (collective, every rank)")
    tensor = bucket.buffer()
    state.stats["calls"] += 1
    step = state.step
    if bucket.is_last():
        state.step += 1
    if step < state.dense_steps:
        return state._passthrough(tensor, "dense warm-up (the first %d steps)" % state.dense_steps)
    if tensor.is_cuda or tensor.device.type != "cpu":
        return state._passthrough(tensor, "%s tensor (gradcomp's C API runs on the CPU only)"
                                  % tensor.device.type)
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        return state._passthrough(tensor, "data type %s" % str(tensor.dtype).replace("torch.", ""))
    if not tensor.is_contiguous():
        return state._passthrough(tensor, "non-contiguous bucket")
    count = tensor.numel()
    config, why = state._decide(count, dtype)
    if config is None:
        return state._passthrough(tensor, why)
    # A key per bucket index and size: stable across steps (DDP rebuilds its
    # buckets once, after the first step), equal on every rank.
    key = ((bucket.index() + 1) << 40) ^ count
    sent, start = state.comm.traffic()["bytes_sent"], time.perf_counter()
    try:
        state.comm.allreduce(tensor.data_ptr(), count, dtype, capi.AVG, config, key)
    except GradcompError as e:
        state._record.failed = str(e)
        _stats.write()
        raise
    seconds = time.perf_counter() - start
    state.stats["compressed_calls"] += 1
    state.stats["compressed_bytes"] += count * tensor.element_size()
    ran = state.comm.last_algorithm()
    state._record.compressed(key, count, count * tensor.element_size(),
                             state.comm.traffic()["bytes_sent"] - sent, seconds, ran)
    state.stats["algorithms"][ran] = state.stats["algorithms"].get(ran, 0) + 1
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut

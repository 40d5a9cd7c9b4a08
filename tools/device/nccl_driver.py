#!/usr/bin/env python3
"""Allreduce driver of the GPU batch (tools/device/gpu_batch.sh, part b).

Launched by torch.distributed.run (one process per rank). Collectives go
through NCCL's C API (ctypes, the libnccl.so.2 PyTorch loaded, on CUDA
tensors), so in-place and out-of-place calls are both possible and an
LD_PRELOADed libgradcomp.so intercepts them exactly as it intercepts PyTorch.
With --backend gloo (CI, no GPU) the same phases run over torch.distributed
on CPU tensors, so everything except NCCL itself is tested without a GPU.

Phases (--phases, run in the order given):
  sweep   sizes x dtypes x ops x {in place, out of place}: the SHA-256 of every
          output into OUT/sweep.rank<R>.txt. The batch compares a run under
          LD_PRELOAD=libgradcomp.so GRADCOMP_ALGO=off with one without it.
  record  the check sequence (every call eligible for compression: floating
          dtypes, sum/avg, >= 1 MiB / --record-divisor): each rank writes its
          inputs and outputs under --record DIR, rank 0 the manifest that
          gradcomp-refcheck replays through the algorithm's Reference.
  exact   integer-valued inputs, whose sums are exact in any order: every
          output must equal the sum of every rank's regenerated input.
  time    time per float32 sum call at --time-sizes (max over ranks); rank 0
          appends JSON lines to OUT/time.jsonl.
  interleave
          side by side in the same processes (issue 31): the run's first
          communicator ("flagged", creation index 0: what a GRADCOMP_CONFIG
          rule or GRADCOMP_COMMS=index:0 selects) and a second one ("plain":
          with --interleave-plain interposer, created after it through the
          interposer and left unselected, i.e. NCCL's dense allreduce behind
          gradcomp's pass-through; with real, created and called through the
          NCCL library's own pncclCommInitRank / pncclAllReduce, which the
          interposer never sees: NCCL alone). Calls alternate (flagged then
          plain, then plain then flagged, ...), each timed alone between a
          gloo barrier and a device synchronize; --interleave-warmup pairs are
          not timed. Per call the max over ranks; rank 0 appends one JSON line
          per size to OUT/interleave.jsonl: the medians (ms per call) of each
          communicator, their ratio flagged / plain, and every call's time.
Inputs are pure functions of (seed, rank, case), so reruns and peers
regenerate them. OUT/driver.rank<R>.json counts the NCCL allreduce calls
made (all of record and time are eligible for compression; the
interleave phase's calls are counted apart, per communicator). Exit 1 when an
exact check failed; errors raise (torchrun reports the rank).
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
          "int32": torch.int32}
NCCL_DTYPE = {torch.int32: 2, torch.float16: 6, torch.float32: 7, torch.bfloat16: 9}
NCCL_OP = {"sum": 0, "max": 2, "avg": 4}
# The record phase: (tensor, dtype, op, in place, elements), in call order.
# Four logical tensors interleaved, so per-tensor state (error feedback,
# thresholds, call counters) is exercised across repeated calls.
RECORD_SEQUENCE = [
    (1, "float", "sum", True, 1 << 20),
    (2, "float", "avg", False, 1 << 18),
    (1, "float", "sum", True, 1 << 20),
    (3, "bfloat16", "sum", True, 1 << 20),
    (2, "float", "avg", False, 1 << 18),
    (1, "float", "sum", True, 1 << 20),
    (4, "half", "avg", False, 1 << 19),
]


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def size_list(text):
    """'1K:64M' (x4 steps) or a comma list of sizes."""
    if ":" in text:
        lo, hi = (parse_size(t) for t in text.split(":"))
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= 4
        return out
    return [parse_size(t) for t in text.split(",")]


class NcclComm:
    """ncclCommInitRank / ncclAllReduce / ncclCommDestroy through ctypes. The
    entry points the interposer defines are looked up in the global scope
    first (where an LD_PRELOADed libgradcomp.so sits, as for a program
    linked against NCCL), then in the libnccl.so.2 that PyTorch loaded.
    real=True: every function is the library's own pnccl* (NCCL's profiling
    names, which the interposer does not define), so the communicator and
    its calls never pass through gradcomp even under LD_PRELOAD."""

    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_ubyte * 128)]  # not c_char: bytes() stops at a NUL

    def __init__(self, rank, nranks, device, real=False):
        try:
            self.lib = ctypes.CDLL("libnccl.so.2")  # by soname: the copy torch already loaded
        except OSError:
            import nvidia.nccl  # PyTorch's NCCL wheel (nvidia-nccl-cu13), not loaded yet
            self.lib = ctypes.CDLL(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))
        with open("/proc/self/maps") as maps:
            self.path = next((line.split()[-1] for line in maps if "libnccl.so" in line), "?")
        scope = ctypes.CDLL(None)

        def fn(name, restype=ctypes.c_int):
            try:
                f = getattr(self.lib, "p" + name) if real else getattr(scope, name)
            except AttributeError:
                f = getattr(self.lib, name)
            f.restype = restype
            return f

        self.get_error = fn("ncclGetErrorString", ctypes.c_char_p)
        self.last_error = fn("ncclGetLastError", ctypes.c_char_p)
        self.all_reduce = fn("ncclAllReduce")
        self.all_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        version = ctypes.c_int()
        self.check(fn("ncclGetVersion")(ctypes.byref(version)), "ncclGetVersion")
        self.version = version.value
        uid = NcclComm.UniqueId()
        if rank == 0:
            self.check(fn("ncclGetUniqueId")(ctypes.byref(uid)), "ncclGetUniqueId")
        box = [bytes(uid.internal) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)  # over the gloo bootstrap group
        ctypes.memmove(ctypes.addressof(uid), box[0], 128)
        self.comm = ctypes.c_void_p()
        init = fn("ncclCommInitRank")
        init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclComm.UniqueId, ctypes.c_int]
        self.device = device
        self.check(init(ctypes.byref(self.comm), nranks, uid, rank), "ncclCommInitRank")
        self.real = real
        self.destroy_fn = fn("ncclCommDestroy")
        self.destroy_fn.argtypes = [ctypes.c_void_p]

    def check(self, result, what):
        if result != 0:
            detail = self.last_error(getattr(self, "comm", None)) if hasattr(self, "last_error") else b""
            raise RuntimeError("%s failed: %s (%s)" % (what, self.get_error(result).decode(),
                                                      (detail or b"").decode()))

    def allreduce(self, send, recv, op):
        stream = torch.cuda.current_stream(self.device).cuda_stream if self.device.type == "cuda" else None
        self.check(self.all_reduce(send.data_ptr(), recv.data_ptr(), send.numel(),
                                   NCCL_DTYPE[send.dtype], NCCL_OP[op], self.comm, stream),
                   "ncclAllReduce")

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def destroy(self):
        self.sync()
        self.check(self.destroy_fn(self.comm), "ncclCommDestroy")


class GlooComm:
    """The same interface over torch.distributed on CPU tensors (CI). Gloo has
    no avg and no bfloat16: avg is sum then divide, bfloat16 is reduced in
    float32 and rounded once; both stay within the dense Reference's rounding
    tolerance."""

    version = 0
    path = "gloo"

    def allreduce(self, send, recv, op):
        work = send.float() if send.dtype == torch.bfloat16 else send.clone()
        dist.all_reduce(work, dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        if op == "avg":  # integers: truncated, as NCCL's integer avg
            work = torch.div(work, dist.get_world_size(),
                             rounding_mode=None if work.is_floating_point() else "trunc")
        recv.copy_(work)

    def sync(self):
        pass

    def destroy(self):
        pass


def generate(seed, rank, case, n, dtype, kind, device):
    """Rank `rank`'s input of case `case`: 'normal' (gradient-like, a
    rank-dependent scale) or 'integer' (small integers, exact sums)."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1000003 + rank * 7919 + case * 104729) % (1 << 62))
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, (n,), generator=g, device=device, dtype=torch.int32)
    if kind == "integer":
        return torch.randint(-8, 9, (n,), generator=g, device=device, dtype=torch.int32).to(dtype)
    return (torch.randn(n, generator=g, device=device) * (1.0 + 0.25 * rank)).to(dtype)


def raw_bytes(t):
    return t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()


class Driver:
    def __init__(self, args, comm, rank, nranks, device):
        self.a, self.comm, self.rank, self.nranks, self.device = args, comm, rank, nranks, device
        self.calls = 0       # NCCL allreduce calls made (the stats check compares)
        self.case = 0        # input case counter, the same sequence on every rank
        self.exact_failures = 0
        self.interleave_calls = {}  # communicator -> calls of the interleave phase

    def input_of(self, rank, case, n, dtype, kind):
        return generate(self.a.seed, rank, case, n, dtype, kind, self.device)

    def next_input(self, n, dtype, kind):
        self.case += 1
        return self.input_of(self.rank, self.case, n, dtype, kind)

    def call(self, send, recv, op):
        self.comm.allreduce(send, recv, op)
        self.calls += 1

    def sweep(self):
        lines = []
        for size in size_list(self.a.sweep_sizes):
            for dname in self.a.sweep_dtypes.split(","):
                dtype = DTYPES[dname]
                n = max(1, size // torch.tensor([], dtype=dtype).element_size())
                for op in self.a.sweep_ops.split(","):
                    for inplace in (True, False):
                        x = self.next_input(n, dtype, "normal")
                        y = x if inplace else torch.empty_like(x)
                        self.call(x, y, op)
                        self.comm.sync()
                        digest = hashlib.sha256(raw_bytes(y)).hexdigest()
                        lines.append("%s %s %s %d %s" % (dname, op, "inplace" if inplace else "outofplace",
                                                         size, digest))
        with open(os.path.join(self.a.out, "sweep.rank%d.txt" % self.rank), "w") as f:
            f.write("\n".join(lines) + "\n")

    def record(self):
        rec = self.a.record
        os.makedirs(rec, exist_ok=True)
        if self.rank == 0 and os.path.exists(os.path.join(rec, "manifest.txt")):
            os.remove(os.path.join(rec, "manifest.txt"))  # never check an older run's recording
        buffers = {}  # tensor -> (send, recv), alive for the whole sequence: distinct addresses
        manifest = ["# recorded by tools/device/nccl_driver.py", "algo %s" % os.environ.get("GRADCOMP_ALGO", "off"),
                    "nranks %d" % self.nranks]
        manifest += ["env %s=%s" % (k, v) for k, v in sorted(os.environ.items()) if k.startswith("GRADCOMP_")]
        for index, (tensor, dname, op, inplace, n) in enumerate(RECORD_SEQUENCE):
            dtype = DTYPES[dname]
            n //= self.a.record_divisor
            if tensor not in buffers:
                send = torch.empty(n, dtype=dtype, device=self.device)
                buffers[tensor] = (send, send if inplace else torch.empty_like(send))
            send, recv = buffers[tensor]
            send.copy_(self.next_input(n, dtype, self.a.record_inputs))
            stem = os.path.join(rec, "rank%d.call%d" % (self.rank, index))
            with open(stem + ".in", "wb") as f:
                f.write(raw_bytes(send))
            self.call(send, recv, op)
            self.comm.sync()
            with open(stem + ".out", "wb") as f:
                f.write(raw_bytes(recv))
            manifest.append("call %d %d %s %s %d" % (index, tensor, dname, op, n))
        if self.rank == 0:
            with open(os.path.join(rec, "manifest.txt"), "w") as f:
                f.write("\n".join(manifest) + "\n")

    def exact(self):
        lines = []
        for size in size_list(self.a.exact_sizes):
            for dname in self.a.exact_dtypes.split(","):
                dtype = DTYPES[dname]
                n = max(1, size // torch.tensor([], dtype=dtype).element_size())
                for inplace in (True, False):
                    x = self.next_input(n, dtype, "integer")
                    y = x if inplace else torch.empty_like(x)
                    self.call(x, y, "sum")
                    self.comm.sync()
                    want = torch.zeros(n, dtype=torch.float64, device=self.device)
                    for r in range(self.nranks):
                        want += self.input_of(r, self.case, n, dtype, "integer").to(torch.float64)
                    bad = int((y.to(torch.float64) != want).sum().item())
                    self.exact_failures += bad != 0
                    lines.append("%s %s %d %s" % (dname, "inplace" if inplace else "outofplace", size,
                                                  "exact" if bad == 0 else "WRONG %d elements" % bad))
        with open(os.path.join(self.a.out, "exact.rank%d.txt" % self.rank), "w") as f:
            f.write("\n".join(lines) + "\n")

    def time(self):
        for size in size_list(self.a.time_sizes):
            n = size // 4
            x = self.next_input(n, torch.float32, "normal")
            y = torch.empty_like(x)
            for _ in range(self.a.time_warmup):
                self.call(x, y, "sum")
            self.comm.sync()
            t0 = time.perf_counter()
            for _ in range(self.a.time_iters):
                self.call(x, y, "sum")
            self.comm.sync()
            seconds = torch.tensor([(time.perf_counter() - t0) / self.a.time_iters], dtype=torch.float64)
            dist.all_reduce(seconds, dist.ReduceOp.MAX)  # gloo group: not an NCCL call
            if self.rank == 0:
                s = seconds.item()
                algbw = size / s / 1e9
                row = {"label": self.a.label, "algo": os.environ.get("GRADCOMP_ALGO", "off"),
                       "bytes": size, "ranks": self.nranks, "us_per_call": round(s * 1e6, 1),
                       "algbw_GBps": round(algbw, 3),
                       "busbw_GBps": round(algbw * 2 * (self.nranks - 1) / self.nranks, 3)}
                with open(os.path.join(self.a.out, "time.jsonl"), "a") as f:
                    f.write(json.dumps(row) + "\n")
                print("time %s: %d bytes %.1f us/call busbw %.3f GB/s" % (self.a.label, size, s * 1e6,
                                                                         row["busbw_GBps"]))


def median(values):
    v = sorted(values)
    n = len(v)
    return (v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])) if n else 0.0


def interleave(d):
    """The interleave phase (module docstring): d.comm is the flagged
    communicator; the plain one is made here and destroyed at the end."""
    a = d.a
    if a.interleave_iters < 10:
        raise SystemExit("--interleave-iters must be >= 10 (medians of at least 10 calls)")
    if isinstance(d.comm, GlooComm):
        plain = GlooComm()
    else:
        plain = NcclComm(d.rank, d.nranks, d.device, real=a.interleave_plain == "real")
    comms = {"flagged": d.comm, "plain": plain}
    d.interleave_calls = {"flagged": 0, "plain": 0}
    for size in size_list(a.interleave_sizes):
        n = size // 4
        buffers = {}
        for name in comms:
            x = d.next_input(n, torch.float32, "normal")
            buffers[name] = (x, torch.empty_like(x))
        times = {"flagged": [], "plain": []}
        for i in range(a.interleave_warmup + a.interleave_iters):
            order = ("flagged", "plain") if i % 2 == 0 else ("plain", "flagged")
            for name in order:
                x, y = buffers[name]
                dist.barrier()  # gloo: every rank starts the call together
                t0 = time.perf_counter()
                comms[name].allreduce(x, y, "sum")
                comms[name].sync()
                seconds = time.perf_counter() - t0
                d.interleave_calls[name] += 1
                if i >= a.interleave_warmup:
                    times[name].append(seconds)
        both = torch.tensor(times["flagged"] + times["plain"], dtype=torch.float64)
        dist.all_reduce(both, dist.ReduceOp.MAX)  # per call, the slowest rank
        k = a.interleave_iters
        ms = {"flagged": [round(t * 1e3, 4) for t in both[:k].tolist()],
              "plain": [round(t * 1e3, 4) for t in both[k:].tolist()]}
        if d.rank == 0:
            med = {name: median(v) for name, v in ms.items()}
            algo = os.environ.get("GRADCOMP_ALGO") or ("config" if os.environ.get("GRADCOMP_CONFIG")
                                                      else "off")
            row = {"label": a.label, "algo": algo,
                   "config": os.environ.get("GRADCOMP_CONFIG", ""), "bytes": size,
                   "ranks": d.nranks, "calls": k, "warmup": a.interleave_warmup,
                   "plain_via": "gloo" if isinstance(plain, GlooComm) else a.interleave_plain,
                   "flagged_median_ms": round(med["flagged"], 4),
                   "plain_median_ms": round(med["plain"], 4),
                   "ratio": round(med["flagged"] / med["plain"], 4) if med["plain"] > 0 else None,
                   "flagged_ms": ms["flagged"], "plain_ms": ms["plain"]}
            with open(os.path.join(a.out, "interleave.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
            print("interleave %s: %d bytes, flagged %.3f ms, plain (%s) %.3f ms per call "
                  "(medians of %d), ratio %s" % (a.label, size, med["flagged"], row["plain_via"],
                                                 med["plain"], k, row["ratio"]))
    plain.destroy()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phases", required=True, help="comma list of sweep, record, exact, time")
    p.add_argument("--out", required=True, help="results folder (created)")
    p.add_argument("--record", help="record phase: folder for inputs, outputs and the manifest")
    p.add_argument("--record-inputs", default="normal", choices=["normal", "integer"])
    p.add_argument("--record-divisor", type=int, default=1,
                   help="divide the record sequence's element counts (smaller CI runs)")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"],
                   help="auto: nccl when CUDA is available, else gloo")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="nccl on cpu needs a host-memory libnccl.so.2 (CI: tests/nccl_double)")
    p.add_argument("--label", default="", help="names this run in time.jsonl")
    p.add_argument("--init-file", help="rendezvous through this (absent) file instead of torchrun's "
                   "environment; rank and size from RANK/WORLD_SIZE or GRADCOMP_RANK/GRADCOMP_NRANKS "
                   "(gradcomp-run)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sweep-sizes", default="1K:64M", help="bytes: LO:HI (x4 steps) or a list")
    p.add_argument("--sweep-dtypes", default="float,half,bfloat16,int32")
    p.add_argument("--sweep-ops", default="sum,avg,max")
    p.add_argument("--exact-sizes", default="1K:64M")
    p.add_argument("--exact-dtypes", default="float,int32")
    p.add_argument("--time-sizes", default="4M,64M")
    p.add_argument("--time-iters", type=int, default=10)
    p.add_argument("--time-warmup", type=int, default=3)
    p.add_argument("--interleave-sizes", default="4M", help="bytes per float32 sum call")
    p.add_argument("--interleave-iters", type=int, default=12,
                   help="timed calls per communicator and size (>= 10)")
    p.add_argument("--interleave-warmup", type=int, default=3, help="untimed pairs first")
    p.add_argument("--interleave-plain", default="interposer", choices=["interposer", "real"],
                   help="the plain communicator: through the interposer, unselected, or "
                   "NCCL's own pnccl* functions (never the interposer)")
    a = p.parse_args()
    phases = a.phases.split(",")
    unknown = set(phases) - {"sweep", "record", "exact", "time", "interleave"}
    if unknown or ("record" in phases and not a.record):
        p.error("unknown phases %s" % sorted(unknown) if unknown else "--phases record needs --record")
    backend = a.backend if a.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")

    # The gloo group: bootstrap and timing reductions; NCCL gets its own comm.
    if a.init_file:
        env = os.environ
        dist.init_process_group("gloo", init_method="file://" + os.path.abspath(a.init_file),
                                rank=int(env.get("RANK", env.get("GRADCOMP_RANK", "-1"))),
                                world_size=int(env.get("WORLD_SIZE", env.get("GRADCOMP_NRANKS", "-1"))))
    else:
        dist.init_process_group("gloo")  # torchrun's environment
    rank, nranks = dist.get_rank(), dist.get_world_size()
    os.makedirs(a.out, exist_ok=True)
    cuda = a.device == "cuda" or (a.device == "auto" and backend == "nccl")
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    comm = NcclComm(rank, nranks, device) if backend == "nccl" else GlooComm()
    if rank == 0:
        print("nccl_driver: %s, %d ranks, phases %s, torch %s, NCCL %d (%s), GRADCOMP_ALGO=%s" % (
            backend, nranks, a.phases, torch.__version__, comm.version, comm.path,
            os.environ.get("GRADCOMP_ALGO", "unset")))
    d = Driver(a, comm, rank, nranks, device)
    for phase in phases:
        interleave(d) if phase == "interleave" else getattr(d, phase)()
    comm.destroy()
    with open(os.path.join(a.out, "driver.rank%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "nranks": nranks, "backend": backend, "phases": phases,
                   "nccl_allreduce_calls": d.calls, "exact_failures": d.exact_failures,
                   "interleave_calls": d.interleave_calls,
                   "nccl_version": comm.version, "torch": torch.__version__}, f)
        f.write("\n")
    dist.destroy_process_group()
    return 1 if d.exact_failures else 0


if __name__ == "__main__":
    sys.exit(main())

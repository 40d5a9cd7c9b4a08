#!/usr/bin/env python3
"""jax.lax.psum over N processes, for the GPU batch's part e (issue 31).

One process per rank, one device each (on the GPU machine every rank uses
the one GPU: NCCL sees N hosts through NCCL_HOSTID, tools/device/rank_env.sh).
JAX's NCCL is reached through gradcomp's forwarding libnccl.so.2 (its folder
first on LD_LIBRARY_PATH, GRADCOMP_NCCL_LIBRARY the real one) with
libgradcomp.so LD_PRELOADed; the script itself knows nothing of gradcomp.
On the CPU (CI) the same psum runs over JAX's gloo CPU collectives.

Each rank sums --calls float32 vectors of --elements through
shard_map(psum) over a mesh of every process's device. Inputs are pure
functions of (seed, rank, call), so each rank recomputes the exact sum
(float64) and compares: --inputs integer (small integers: any summation
order is exact) or normal (gradient-like: compressed runs are close, not
exact). Rank R writes OUT/jax.rank<R>.json: its errors, the SHA-256 of its
last result (equal on every rank for an allreduce), the median ms per call
after --warmup calls, and which libnccl.so the process mapped.
tools/device/batch_check.py jax OUT gives the verdict.

Rank and size: --rank/--nranks, else RANK/WORLD_SIZE (torchrun), else
GRADCOMP_RANK/GRADCOMP_NRANKS (gradcomp-run). --coordinator HOST:PORT is
JAX's coordination service (rank 0 listens).
"""
import argparse
import hashlib
import json
import os
import sys
import time


def env_int(*names):
    for n in names:
        if os.environ.get(n, "") != "":
            return int(os.environ[n])
    return None


def mapped_nccl():
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if "libnccl.so" in line})
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--coordinator", required=True, help="HOST:PORT of JAX's coordination service")
    p.add_argument("--rank", type=int)
    p.add_argument("--nranks", type=int)
    p.add_argument("--platform", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--inputs", default="integer", choices=["integer", "normal"])
    p.add_argument("--elements", type=int, default=1 << 20, help="float32 elements per call")
    p.add_argument("--calls", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2, help="first calls not timed")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--label", default="")
    a = p.parse_args()
    rank = a.rank if a.rank is not None else env_int("RANK", "GRADCOMP_RANK")
    nranks = a.nranks if a.nranks is not None else env_int("WORLD_SIZE", "GRADCOMP_NRANKS")
    if rank is None or nranks is None:
        p.error("no rank/size: --rank/--nranks, RANK/WORLD_SIZE or GRADCOMP_RANK/GRADCOMP_NRANKS")

    os.environ["JAX_PLATFORMS"] = a.platform
    if a.platform == "cuda":
        # N processes share the GPU: no process may take most of its memory.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import numpy as np
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    try:
        shard_map = jax.shard_map
    except AttributeError:
        from jax.experimental.shard_map import shard_map
    if a.platform == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=a.coordinator, num_processes=nranks,
                               process_id=rank,
                               local_device_ids=[0] if a.platform == "cuda" else None)
    devices = jax.devices()
    if len(devices) != nranks or len(jax.local_devices()) != 1:
        raise SystemExit("want one device per process: %d global, %d local" % (
            len(devices), len(jax.local_devices())))
    mesh = Mesh(np.array(devices), ("r",))
    sharding = NamedSharding(mesh, P("r"))
    psum = jax.jit(shard_map(lambda x: jax.lax.psum(x, "r"), mesh=mesh, in_specs=P("r"),
                             out_specs=P()))

    def generate(r, call):
        g = np.random.default_rng((a.seed * 1000003 + r * 7919 + call * 104729) % (1 << 62))
        if a.inputs == "integer":
            return g.integers(-8, 9, a.elements).astype(np.float32)
        return (g.standard_normal(a.elements) * (1.0 + 0.25 * r)).astype(np.float32)

    max_abs, max_rel, exact, times, digest = 0.0, 0.0, True, [], ""
    for call in range(a.calls):
        local = generate(rank, call)[None, :]
        x = jax.make_array_from_process_local_data(sharding, local, (nranks, a.elements))
        t0 = time.perf_counter()
        y = psum(x)
        y.block_until_ready()
        if call >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
        got = np.asarray(y.addressable_data(0)).reshape(-1)
        want = sum(generate(r, call).astype(np.float64) for r in range(nranks))
        err = np.abs(got.astype(np.float64) - want)
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float(np.linalg.norm(err) / max(np.linalg.norm(want), 1e-30)))
        exact = exact and bool((got.astype(np.float64) == want).all())
        digest = hashlib.sha256(got.tobytes()).hexdigest()
    times.sort()
    row = {"rank": rank, "nranks": nranks, "label": a.label, "platform": a.platform,
           "jax": jax.__version__, "device": str(jax.local_devices()[0]), "libnccl": mapped_nccl(),
           "calls": a.calls, "elements": a.elements, "inputs": a.inputs,
           "algo": os.environ.get("GRADCOMP_ALGO", "unset"), "exact": exact,
           "max_abs_err": max_abs, "max_rel_l2_err": max_rel, "last_sha256": digest,
           "median_ms": times[len(times) // 2] if times else None}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "jax.rank%d.json" % rank), "w") as f:
        json.dump(row, f)
        f.write("\n")
    print("jax_psum rank %d/%d (%s, jax %s, %s): %d calls of %d floats, exact %s, "
          "max rel L2 error %.3g, median %.3f ms, libnccl %s" % (
              rank, nranks, a.platform, jax.__version__, row["device"], a.calls, a.elements,
              exact, max_rel, row["median_ms"] or 0, row["libnccl"]))
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

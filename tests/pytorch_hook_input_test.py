#!/usr/bin/env python3
"""Bad input to gradcomp.torch's DDP hook (issue 43's last section) beyond
tests/pytorch_hook_test.py (whose harness this reuses: 2 ranks on gloo,
forked), ctest -L pytorch (tests/pytorch_models.cmake).

Scenario "settings" (GRADCOMP_CALL_CHECK=0, so the library's per-call check
cannot be what catches it): ranks whose GradcompState differ in dense_steps,
in an algorithm parameter, or in fixed algorithm against the configuration's
fail GradcompState() on every rank, naming the key and both values, at once
(no timeout waited); a state made after them, equal on every rank, trains.
Scenario "dtype" (GRADCOMP_ALGO=qsgd from the environment, the library's
verdict per bucket): a float64 model's buckets all pass through to gloo's
allreduce, the reason logged once (logger gradcomp.torch) however many
buckets, ranks bit-equal; float64 and int64 buckets come back as the exact
average (int64 truncated); the stats file (GRADCOMP_STATS) counts them under
the reason. Scenario "nostore": a default group without a store (what an MPI
process group holds: emulated in torch's group map) makes GradcompState()
fail naming the missing store and the remedy; with store= a FileStore the
same job trains through gradcomp. Scenario "unfixed": states fix qsgd but
GRADCOMP_BITS differs across ranks (what the state leaves to the
environment): the first bucket fails on every rank with the call check's
message naming BITS, and the stats file records it as failed.

Usage: pytorch_hook_input_test.py BUILD_DIR. Exit 0 = pass, 77 = no torch.
"""
import json
import logging
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_hook_test as base  # noqa: E402  (exits 77 without torch)

import gradcomp.stats as gcs  # noqa: E402
import gradcomp.torch as gct  # noqa: E402

torch, dist, DDP = base.torch, base.dist, base.DDP
P = base.P
PASS_DTYPE = "data type not f32/f16/bf16"  # the library's verdict (policy.h)


def equal_everywhere(flat, what):
    everyone = [torch.empty_like(flat) for _ in range(P)]
    dist.all_gather(everyone, flat)
    for r in range(P):
        assert torch.equal(everyone[r], everyone[0]), "%s: rank %d's parameters differ from rank 0's" % (what, r)


def scenario_settings(rank):
    out = []
    cases = [
        ("dense_steps", dict(algo="qsgd"), dict(algo="qsgd", dense_steps=2),
         "key 'dense_steps' is '0' on rank 0 but '2' on rank 1"),
        ("a parameter", dict(algo="oktopk", params={"DENSITY": "0.05"}),
         dict(algo="oktopk", params={"DENSITY": "0.1"}),
         "key 'params.DENSITY' is '0.05' on rank 0 but '0.1' on rank 1"),
        ("algo= against the configuration", dict(), dict(algo="qsgd"),
         "key 'algo' is '(the configuration's, per bucket)' on rank 0 but 'qsgd' on rank 1"),
    ]
    for what, kw0, kw1, needle in cases:
        t0 = time.time()
        msg = base.expect_failure(what, lambda: gct.GradcompState(**(kw0 if rank == 0 else kw1)), needle)
        seconds = time.time() - t0
        # Far below GRADCOMP_TIMEOUT_S (20 s here): decided, not timed out.
        assert seconds < 10, "%s: took %.1f s" % (what, seconds)
        out.append("%s differs: failed in %.2f s: %s" % (what, seconds, msg))
    state = gct.GradcompState(algo="qsgd")
    flat = base.train(rank, state)
    equal_everywhere(flat, "the agreeing state")
    assert state.stats["compressed_calls"] > base.STEPS, state.stats
    out.append("then an agreeing state trains: %d buckets compressed" % state.stats["compressed_calls"])
    return out


class Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def scenario_dtype(rank):
    kept = Keep()
    logging.getLogger("gradcomp.torch").addHandler(kept)
    state = gct.GradcompState()  # GRADCOMP_ALGO=qsgd, GRADCOMP_MIN_BYTES=0: the library decides
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8192
    net = DDP(base.model().double(), bucket_cap_mb=0.008)  # several float64 buckets
    net.register_comm_hook(state, gct.allreduce_hook)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(base.STEPS):
        x = torch.randn(16, 32, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    equal_everywhere(flat, "float64 model")
    assert not torch.equal(flat, torch.cat([p.reshape(-1) for p in base.model().double().parameters()])), \
        "float64 model: never trained"
    s = state.stats
    assert s["calls"] > base.STEPS and s["compressed_calls"] == 0 and \
        s["passthrough"] == {PASS_DTYPE: s["calls"]}, s
    # Exact averages of buckets handed to the hook: float64, then int64 (truncated).
    t = torch.arange(10, dtype=torch.float64) * (rank + 1)
    got = gct.allreduce_hook(state, base.Bucket(t)).wait()
    assert torch.equal(got, torch.arange(10, dtype=torch.float64) * 1.5), got
    t = torch.arange(10, dtype=torch.int64) * (rank + 1)
    got = gct.allreduce_hook(state, base.Bucket(t)).wait()
    assert torch.equal(got, (torch.arange(10, dtype=torch.int64) * 3).div(2, rounding_mode="trunc")), got
    logged = [m for m in kept.messages if PASS_DTYPE in m]
    assert len(logged) == 1, "the pass-through reason was logged %d times: %s" % (len(logged), kept.messages)
    state.close()  # writes the stats file
    with open(gcs.path()) as f:
        c = json.load(f)["communicators"][-1]
    assert c["calls_compressed"] == 0 and c["pass_reasons"] == {PASS_DTYPE: s["calls"]} and \
        c["calls_passed"] == s["calls"] and c["passed_bytes"] == s["passthrough_bytes"], c
    return ["float64 model: %d buckets passed through to gloo, logged once: %s" % (s["calls"] - 2, logged[0]),
            "float64 and int64 buckets: the exact average; stats file: %d calls under '%s'"
            % (c["calls_passed"], PASS_DTYPE)]


def scenario_nostore(rank):
    c10d = dist.distributed_c10d
    groups = c10d._world.pg_map if hasattr(c10d, "_world") else c10d._pg_map  # 2.x, 1.13
    pg = c10d._get_default_group()
    saved = groups[pg]
    groups[pg] = (saved[0], None)  # an MPI process group's entry: no store
    try:
        msg = base.expect_failure("no store", gct.GradcompState,
                                  "has no store to meet through; pass GradcompState(store=...)")
        store = dist.FileStore(os.path.join(os.environ["GC_TEST_TMP"], "hook.store"), P)
        state = gct.GradcompState(store=store, algo="qsgd")
        flat = base.train(rank, state)
    finally:
        groups[pg] = saved
    equal_everywhere(flat, "store=")
    assert state.stats["compressed_calls"] > base.STEPS, state.stats
    return ["no store: " + msg,
            "store=FileStore: %d buckets compressed" % state.stats["compressed_calls"]]


def scenario_unfixed(rank):
    """GRADCOMP_BITS differs; the states fix qsgd but not its BITS: the call
    check fails the first bucket on every rank, and the stats file says so."""
    state = gct.GradcompState(algo="qsgd")
    msg = base.expect_failure("GRADCOMP_BITS differs", lambda: base.train(rank, state), "BITS")
    with open(gcs.path()) as f:
        c = json.load(f)["communicators"][-1]
    assert c["failed"] and "BITS" in c["failed"] and c["calls_compressed"] == 0, c
    return ["GRADCOMP_BITS differs under a fixed algo: " + msg, "stats file: failed: " + c["failed"][:120]]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    os.environ.setdefault("LIBGRADCOMP_API", os.path.join(build, "plugin", "libgradcomp-api.so"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["GRADCOMP_TIMEOUT_S"] = "20"
    os.environ["GRADCOMP_CONFIG"] = ""
    for v in ("GRADCOMP_RANK", "GRADCOMP_NRANKS", "GRADCOMP_BOOTSTRAP", "GRADCOMP_STATS"):
        os.environ.pop(v, None)
    start = time.time()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        common = {"GRADCOMP_ALGO": "qsgd", "GRADCOMP_BITS": "4", "GRADCOMP_MIN_BYTES": "0",
                  "GC_TEST_TMP": tmp}
        ok = base.run(scenario_settings, [dict(common, GRADCOMP_CALL_CHECK="0")] * P, tmp) and ok
        ok = base.run(scenario_dtype, [dict(common, GRADCOMP_STATS=os.path.join(tmp, "gc"))] * P,
                      tmp) and ok
        ok = base.run(scenario_nostore, [common] * P, tmp) and ok
        bits = [dict(common, GRADCOMP_BITS=str(4 * (r + 1)), GRADCOMP_STATS=os.path.join(tmp, "gcf"))
                for r in range(P)]
        ok = base.run(scenario_unfixed, bits, tmp) and ok
    print("%s in %.1f s" % ("PASS" if ok else "FAIL", time.time() - start))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""gradcomp.torch's DDP communication hook on gloo, 2 ranks on this machine
(ctest -L pytorch: tests/pytorch.cmake).

Scenario "train" (GRADCOMP_ALGO=qsgd GRADCOMP_BITS=4 GRADCOMP_MIN_BYTES=0 for
every rank): a tiny MLP trained a few steps through the hook, once with the
configuration's algorithm (qsgd, chosen by the library per bucket) and once
with oktopk set on the state, once on a group of dist.new_group, once after a dense warm-up of 2 steps
(dense_steps); each run checks that the buckets were
compressed (calls ran the algorithm, the communicator sent fewer bytes than a
dense ring would: 2 (P-1)/P of the bucket bytes) and that every rank's
parameters are bit-equal after the steps. Then an int32 bucket handed to the
hook passes through to gloo's allreduce (the average, truncated), and states
whose algorithms differ across ranks fail GradcompState() on every rank,
naming the key that differs. Scenario "mismatch": GRADCOMP_ALGO
differs across ranks: GradcompState() fails on every rank naming the key. Scenario
"dies": rank 1 exits before its step; rank 0's step fails, no hang (gloo or
gradcomp's failure monitor reports it, whichever DDP reaches first). And
without a process group, GradcompState raises naming what is missing.

Usage: pytorch_hook_test.py BUILD_DIR (finds BUILD_DIR/plugin/libgradcomp-api.so
and the package beside this file in ../python). Exit 0 = pass, 77 = no torch.
"""
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    # Debian's python3-torch lives in the system interpreter; a PATH python3
    # (pyenv, a venv) may not see it.
    system = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(system) and os.access(system, os.X_OK):
        os.execv(system, [system] + sys.argv)
    print("SKIP: cannot import torch: %s (apt-get install python3-torch)" % e)
    sys.exit(77)

import gradcomp.torch as gct  # noqa: E402

P = 2
STEPS = 4


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 10))


def train(rank, state, group=None):
    """STEPS of SGD through the hook; the flat parameters after them."""
    # Several buckets of the 27 KB of gradients: DDP's first bucket takes up
    # to _DEFAULT_FIRST_BUCKET_BYTES (1 MB), then bucket_cap_mb.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8192
    net = DDP(model(), bucket_cap_mb=0.008, process_group=group)
    net.register_comm_hook(state, gct.allreduce_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(STEPS):
        x, y = torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def check_trained(rank, state, algo, group=None):
    state.comm.reset_traffic()
    flat = train(rank, state, group)
    everyone = [torch.empty_like(flat) for _ in range(P)]
    dist.all_gather(everyone, flat)
    for r in range(P):
        assert torch.equal(everyone[r], everyone[0]), \
            "%s: rank %d's parameters differ from rank 0's after %d steps" % (algo, r, STEPS)
    s = state.stats
    assert s["compressed_calls"] >= STEPS, "%s: only %d buckets compressed: %s" % (algo, s["compressed_calls"], s)
    assert s["passthrough_calls"] == 0, "%s: buckets passed through: %s" % (algo, s)
    ran = set(a.split(":")[0] for a in s["algorithms"])
    assert ran == {algo}, "%s: the calls ran %s" % (algo, s["algorithms"])
    dense = s["compressed_bytes"] * 2 * (P - 1) // P
    sent = state.traffic()["bytes_sent"]
    assert 0 < sent < dense, "%s: sent %d bytes, a dense ring sends %d" % (algo, sent, dense)
    moved = torch.norm(flat - torch.cat([p.reshape(-1) for p in model().parameters()]))
    assert moved > 0, "%s: the parameters never changed" % algo
    assert s["compressed_calls"] > STEPS, "%s: one bucket per step: %s" % (algo, s)
    return "%s: %d buckets, %d B sent vs %d B dense (%.1fx less)" % (
        algo, s["compressed_calls"], sent, dense, dense / sent)


class Bucket:
    """What the hook reads of a torch.distributed.GradBucket."""

    def __init__(self, tensor, index=0):
        self._t, self._i = tensor, index

    def buffer(self):
        return self._t

    def index(self):
        return self._i

    def is_last(self):
        return True


def expect_failure(what, fn, needle):
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (DDP may wrap the hook's error)
        msg = str(e)
        assert needle is None or needle in msg, "%s: the error does not name '%s': %s" % (what, needle, msg)
        return msg.splitlines()[0][:200]
    raise AssertionError("%s: no error" % what)


def scenario_train(rank):
    out = [check_trained(rank, gct.GradcompState(), "qsgd")]  # from GRADCOMP_ALGO
    out.append(check_trained(rank, gct.GradcompState(algo="oktopk", params={"DENSITY": "0.05"}),
                             "oktopk"))
    group = dist.new_group([0, 1])  # a group of its own: its own store keys
    out.append("new_group " + check_trained(
        rank, gct.GradcompState(process_group=group, algo="qsgd"), "qsgd", group))
    warm = gct.GradcompState(algo="qsgd", dense_steps=2)
    flat = train(rank, warm)
    everyone = [torch.empty_like(flat) for _ in range(P)]
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1]), "dense_steps=2: parameters differ"
    ws = warm.stats
    assert list(ws["passthrough"]) == ["dense warm-up (the first 2 steps)"] and \
        ws["compressed_calls"] > 0 and ws["passthrough_calls"] + ws["compressed_calls"] == ws["calls"], ws
    out.append("dense_steps=2: %d buckets dense, then %d compressed" % (
        ws["passthrough_calls"], ws["compressed_calls"]))
    state = gct.GradcompState(algo="qsgd")
    t = torch.arange(10, dtype=torch.int32) * (rank + 1)
    got = gct.allreduce_hook(state, Bucket(t)).wait()
    want = (torch.arange(10, dtype=torch.int32) * 3).div(2, rounding_mode="trunc")
    assert torch.equal(got, want), "int32 bucket: %s, want %s" % (got, want)
    assert state.stats["passthrough"] == {"data type not f32/f16/bf16": 1}, state.stats
    out.append("int32 bucket passed through to gloo")
    out.append("algorithms differ: " + expect_failure(
        "algorithms differ", lambda: gct.GradcompState(algo="qsgd" if rank == 0 else "sign"),
        "key 'algo' is 'qsgd' on rank 0 but 'sign' on rank 1"))
    return out


def scenario_mismatch(rank):
    return ["GRADCOMP_ALGO differs: " + expect_failure(
        "GRADCOMP_ALGO differs", gct.GradcompState, "key 'GRADCOMP_ALGO' is 'qsgd' on rank 0 but 'sign' on rank 1")]


def scenario_dies(rank):
    state = gct.GradcompState(algo="qsgd")
    if rank == 1:
        os._exit(3)  # a rank lost before its step
    t0 = time.time()
    # gloo (DDP's own collectives) or gradcomp's failure monitor notices first.
    msg = expect_failure("a rank died", lambda: train(rank, state), None)
    return ["rank 1 died: failed in %.1f s: %s" % (time.time() - t0, msg)]


def worker(rank, scenario, init_file, env, queue):
    try:
        os.environ.update(env[rank])
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=P)
        fn = scenario if callable(scenario) else {"train": scenario_train, "mismatch": scenario_mismatch,
                                                  "dies": scenario_dies}[scenario]
        lines = fn(rank)
        queue.put((rank, True, lines))
    except BaseException:  # noqa: BLE001
        queue.put((rank, False, traceback.format_exc()))
    finally:
        queue.close()
        queue.join_thread()  # flushed before the exit below
        os._exit(0)  # no teardown of a failed communicator (its peers are gone)


def run(scenario, env, tmp, ranks_reporting=P):
    """scenario: a name above or a function of the rank (other test files)."""
    ctx = mp.get_context("fork")  # torch is imported once, here
    queue = ctx.Queue()
    label = scenario.__name__ if callable(scenario) else scenario
    init = os.path.join(tmp, label + ".init")
    procs = [ctx.Process(target=worker, args=(r, scenario, init, env, queue)) for r in range(P)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.time() + 120
    while len(results) < ranks_reporting and time.time() < deadline:
        try:
            rank, ok, payload = queue.get(timeout=1)
            results[rank] = (ok, payload)
        except Exception:  # noqa: BLE001  (queue.Empty)
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
    failed = False
    for r in range(ranks_reporting):
        ok, payload = results.get(r, (False, "no result (hung or died)"))
        if ok:
            for line in payload:
                print("[%s rank %d] %s" % (label, r, line))
        else:
            failed = True
            print("[%s rank %d] FAIL:\n%s" % (label, r, payload))
    return not failed


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    os.environ.setdefault("LIBGRADCOMP_API", os.path.join(build, "plugin", "libgradcomp-api.so"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("GRADCOMP_TIMEOUT_S", "20")
    os.environ["GRADCOMP_CONFIG"] = ""  # this machine's admin file stays out of the test
    for v in ("GRADCOMP_RANK", "GRADCOMP_NRANKS", "GRADCOMP_BOOTSTRAP"):
        os.environ.pop(v, None)  # the store is the only rendezvous
    # No process group: a clear error, no rendezvous attempted.
    msg = expect_failure("no process group", lambda: gct.GradcompState(), "no process group")
    print("no process group: " + msg)
    start = time.time()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        common = {"GRADCOMP_ALGO": "qsgd", "GRADCOMP_BITS": "4", "GRADCOMP_MIN_BYTES": "0"}
        ok = run("train", [common] * P, tmp) and ok
        mism = [dict(common), dict(common, GRADCOMP_ALGO="sign")]
        ok = run("mismatch", mism, tmp) and ok
        ok = run("dies", [common] * P, tmp, ranks_reporting=1) and ok
    print("%s in %.1f s" % ("PASS" if ok else "FAIL", time.time() - start))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

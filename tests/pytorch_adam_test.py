#!/usr/bin/env python3
"""gradcomp.adam (1-bit Adam's frozen variance and compressed momentum as a
DDP hook) on gloo, 2 ranks on this machine (ctest -L pytorch:
tests/pytorch.cmake). A tiny MLP, several buckets, each rank its own data:

- warm-up: after dense_steps (3) steps, adam_hook + PreconditionedAdamW
  give the parameters torch.optim.AdamW gives on plain DDP (same data,
  allclose: the arithmetic is Adam's, in another order);
- oktopk (density 0.05) with compress="momentum", sign with
  compress="gradient", oktopk with compress="gradient", precondition=True,
  7 steps: every rank's parameters and moments are
  bit-equal, v is the same tensor value after the warm-up as at its end
  (frozen) while m moved, and the buckets after the warm-up were compressed;
- with the library's dense algorithm, compress="momentum" and "gradient"
  give the same m (averaging is linear) and the same parameters (allclose),
  and precondition=True the same as False;
- bad arguments (dense_steps=0, an unknown compress, another state type)
  raise GradcompError naming the argument.

Usage: pytorch_adam_test.py BUILD_DIR. Exit 0 = pass, 77 = no torch.
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
    system = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(system) and os.access(system, os.X_OK):
        os.execv(system, [system] + sys.argv)
    print("SKIP: cannot import torch: %s (apt-get install python3-torch)" % e)
    sys.exit(77)

import gradcomp.adam as gca  # noqa: E402
from gradcomp.capi import GradcompError  # noqa: E402

P = 2
WARM = 3


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 10))


def train(rank, steps, state=None, after=None):
    """steps of training; state None: torch.optim.AdamW on plain DDP;
    after(step, parameters) after each step. Returns (flat parameters, the
    DDP module's parameters)."""
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8192  # several buckets
    net = DDP(model(), bucket_cap_mb=0.008)
    groups = [{"params": [p for p in net.parameters() if p.dim() >= 2], "weight_decay": 0.05},
              {"params": [p for p in net.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    if state is None:
        opt = torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    else:
        net.register_comm_hook(state, gca.adam_hook)
        opt = gca.PreconditionedAdamW(groups, lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    params = list(net.parameters())
    for step in range(steps):
        x, y = torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if after is not None:
            after(step, params)
    return torch.cat([p.detach().reshape(-1) for p in params]), params


def gather_equal(flat, what):
    everyone = [torch.empty_like(flat) for _ in range(P)]
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1]), "%s: rank 1's differ from rank 0's" % what


def moments(state, params, which):
    return torch.cat([state.moments[p][which] for p in params])


def expect_failure(what, fn, needle):
    try:
        fn()
    except GradcompError as e:
        assert needle in str(e), "%s: the error does not name '%s': %s" % (what, needle, e)
        return str(e).splitlines()[0][:160]
    raise AssertionError("%s: no GradcompError" % what)


def scenario(rank):
    out = []
    # The warm-up is AdamW.
    ref, _ = train(rank, WARM)
    state = gca.AdamState(algo="oktopk", params={"DENSITY": "0.05"}, dense_steps=WARM)
    got, _ = train(rank, WARM, state)
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6), \
        "warm-up: %g from AdamW's parameters" % (got - ref).abs().max()
    assert state.stats["compressed_calls"] == 0 and state.stats["passthrough_calls"] > 0, state.stats
    out.append("warm-up of %d steps = torch AdamW (max diff %.2g)" % (WARM, (got - ref).abs().max()))
    # Compressed after the warm-up: bit-equal ranks, v frozen.
    for algo, params, compress, pre in (("oktopk", {"DENSITY": "0.05"}, "momentum", False),
                                        ("sign", {}, "gradient", False),
                                        ("oktopk", {"DENSITY": "0.05"}, "gradient", True)):
        state = gca.AdamState(algo=algo, params=params, dense_steps=WARM, compress=compress,
                              precondition=pre)
        at_warm = {}

        def after(step, ps, state=state, at_warm=at_warm):
            if step == WARM - 1:
                at_warm["v"], at_warm["m"] = moments(state, ps, "v"), moments(state, ps, "m")
        flat, params_ = train(rank, WARM + 4, state, after)
        gather_equal(flat, "%s/%s: parameters" % (algo, compress))
        v, m = moments(state, params_, "v"), moments(state, params_, "m")
        gather_equal(torch.cat([v, m]), "%s/%s: moments" % (algo, compress))
        assert state.frozen() and state.step == WARM + 4
        v_warm, m_warm = at_warm["v"], at_warm["m"]
        assert torch.equal(v, v_warm) and (v > 0).any(), \
            "%s: v changed after the warm-up" % algo
        assert not torch.equal(m, m_warm), "%s: m never moved after the warm-up" % algo
        s = state.stats
        assert s["compressed_calls"] > 0 and set(a.split(":")[0] for a in s["algorithms"]) == {algo}, s
        out.append("%s, compress=%s, precondition=%s: ranks bit-equal, v frozen, %d buckets "
                   "compressed" % (algo, compress, pre, s["compressed_calls"]))
    # Linear averaging: both modes agree with the library's dense algorithm.
    res = {}
    for compress, pre in (("momentum", False), ("gradient", False), ("gradient", True)):
        state = gca.AdamState(algo="dense", dense_steps=2, compress=compress, precondition=pre)
        flat, params_ = train(rank, 5, state)
        m = moments(state, params_, "m")
        if pre:  # m is kept divided by the frozen denominator
            m = m * torch.cat([state.moments[p]["denom"] for p in params_])
        res[(compress, pre)] = (flat, m)
    (fa, ma), (fb, mb), (fc, mc) = res[("momentum", False)], res[("gradient", False)], \
        res[("gradient", True)]
    assert torch.allclose(fc, fb, rtol=1e-4, atol=1e-6) and torch.allclose(mc, mb, rtol=1e-3, atol=1e-7), \
        "dense: precondition changed the result: m %g, parameters %g" % (
            (mc - mb).abs().max(), (fc - fb).abs().max())
    assert torch.allclose(ma, mb, rtol=1e-4, atol=1e-7) and torch.allclose(fa, fb, rtol=1e-4, atol=1e-6), \
        "dense: momentum vs gradient: m %g, parameters %g" % ((ma - mb).abs().max(), (fa - fb).abs().max())
    out.append("dense: precondition=True == False (parameters max diff %.2g)" % (fc - fb).abs().max())
    out.append("dense: compress=momentum == gradient (m max rel diff %.2g of max abs m %.2g)" % (
        ((ma - mb).abs() / mb.abs().clamp_min(1e-6)).max(), mb.abs().max()))
    out.append(expect_failure("dense_steps=0", lambda: gca.AdamState(dense_steps=0), "dense_steps"))
    out.append(expect_failure("compress", lambda: gca.AdamState(compress="update"), "compress"))
    out.append(expect_failure("state type", lambda: gca.adam_hook(object(), None), "AdamState"))
    return out


def worker(rank, init_file, queue):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=P)
        queue.put((rank, True, scenario(rank)))
    except BaseException:  # noqa: BLE001
        queue.put((rank, False, traceback.format_exc()))
    finally:
        queue.close()
        queue.join_thread()
        os._exit(0)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    os.environ.setdefault("LIBGRADCOMP_API", os.path.join(build, "plugin", "libgradcomp-api.so"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("GRADCOMP_TIMEOUT_S", "20")
    os.environ["GRADCOMP_CONFIG"] = ""
    os.environ["GRADCOMP_MIN_BYTES"] = "0"
    for v in ("GRADCOMP_ALGO", "GRADCOMP_RANK", "GRADCOMP_NRANKS", "GRADCOMP_BOOTSTRAP"):
        os.environ.pop(v, None)
    start = time.time()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=worker, args=(r, os.path.join(tmp, "init"), queue)) for r in range(P)]
        for p in procs:
            p.start()
        results = {}
        deadline = time.time() + 120
        while len(results) < P and time.time() < deadline:
            try:
                rank, ok, payload = queue.get(timeout=1)
                results[rank] = (ok, payload)
            except Exception:  # noqa: BLE001
                if not any(p.is_alive() for p in procs) and queue.empty():
                    break
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    ok = True
    for r in range(P):
        good, payload = results.get(r, (False, "no result (hung or died)"))
        if good:
            for line in payload:
                print("[rank %d] %s" % (r, line))
        else:
            ok = False
            print("[rank %d] FAIL:\n%s" % (r, payload))
    print("%s in %.1f s" % ("PASS" if ok else "FAIL", time.time() - start))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

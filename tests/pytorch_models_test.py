#!/usr/bin/env python3
"""The accuracy matrix's transformers through gradcomp.torch in CI (ctest -L
pytorch: tests/pytorch.cmake), as a user runs them:

  gradcomp-launch --algo qsgd --bits 4 --min-bytes 0 -- torchrun --nproc-per-node P THIS --worker

Each rank trains STEPS AdamW steps of each model of examples/pytorch/
accuracy_matrix.py (imported: its ViT on Fashion-MNIST images, its CharLM on
lm_task's /usr/share/common-licenses batches; made small with their width and
depth parameters) through the hook, twice: with the configuration's algorithm
(qsgd 4 bit from the launcher's flags, decided by the library per bucket) and
with oktopk set on the state. Each rank checks that every rank's parameters
are bit-equal after the steps and that every bucket ran its algorithm, and
writes its state.stats and traffic. Then this driver checks the launcher
(exit 0), each rank's stats file PREFIX.hook.rank<R>.json (calls and bytes
equal to what the ranks counted, wire bytes below a dense ring's 2 (P-1)/P,
each bucket compressed, the expected algorithms) and gradcomp-launch's
summary (the sums over ranks, the ratio, no pass-through).

Usage: pytorch_models_test.py BUILD_DIR [--ranks P] (BUILD_DIR/plugin/
libgradcomp-api.so, BUILD_DIR/tools/gradcomp-launch/gradcomp-launch).
Exit 0 = pass, 77 = no torch or no Fashion-MNIST (dataset-fashion-mnist).
"""
import argparse
import glob
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives there

FMNIST = "/usr/share/datasets/fashion-mnist"  # accuracy_matrix.FMNIST (the driver imports no torch)
STEPS = 6
# (model, how the state is made, the algorithm the buckets must run)
RUNS = [("vit", "config", "qsgd"), ("vit", "oktopk", "oktopk"),
        ("lm", "config", "qsgd"), ("lm", "oktopk", "oktopk")]


def ensure_torch():
    """Found without importing it (seconds on a busy core): the ranks import it."""
    if importlib.util.find_spec("torch") is None:
        if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and \
                os.access(SYSTEM_PYTHON, os.X_OK):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        print("SKIP: no torch for %s (apt-get install python3-torch)" % sys.executable)
        sys.exit(77)


# ---- worker (one torchrun rank) -------------------------------------------

def train_one(model_name, how, rank, size):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import accuracy_matrix as am
    import gradcomp.torch as gct

    assert am.FMNIST == FMNIST, am.FMNIST
    torch.manual_seed(1)  # the same initial model on every rank
    if model_name == "vit":
        # The matrix's images, normalized as vit_task does; the test set only
        # (vit_task decodes all 60000 training images: seconds on a busy CI core).
        images = am.read_idx(os.path.join(am.FMNIST, "t10k-images-idx3-ubyte.gz"))[:512]
        labels = am.read_idx(os.path.join(am.FMNIST, "t10k-labels-idx1-ubyte.gz"))[:512].long()
        images = (images.float().div_(255) - 0.2860) / 0.3530
        net = am.ViT(dim=32, depth=1, heads=2)

        def batch(step):
            i = torch.arange(16) + (step * size + rank) * 16
            return images[i % len(images)], labels[i % len(images)]
        loss_fn = F.cross_entropy
    else:
        args = argparse.Namespace(batch=16, eval_windows=1, eval_images=1)
        full, batch, loss_fn, _ = am.lm_task(args, rank, size, seed=1)
        torch.manual_seed(1)  # lm_task built its model from the generator's state
        net = am.CharLM(full.head.out_features, dim=32, depth=1, heads=2)
    # Several buckets (the models hold 50-70 KB of gradients): DDP's first
    # bucket takes up to _DEFAULT_FIRST_BUCKET_BYTES, then bucket_cap_mb.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 16384
    model = DDP(net, bucket_cap_mb=0.02)
    state = gct.GradcompState() if how == "config" else \
        gct.GradcompState(algo=how, params={"DENSITY": "0.05"})
    model.register_comm_hook(state, gct.allreduce_hook)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, betas=(0.9, 0.999), weight_decay=0.05)
    before = torch.cat([p.detach().reshape(-1).clone() for p in net.parameters()])
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    what = "%s/%s" % (model_name, how)
    for r in range(size):
        assert torch.equal(everyone[r], everyone[0]), \
            "%s: rank %d's parameters differ from rank 0's after %d steps" % (what, r, STEPS)
    assert not torch.equal(flat, before), "%s: the parameters never changed" % what
    s = dict(state.stats)
    assert s["passthrough_calls"] == 0, "%s: buckets passed through: %s" % (what, s)
    assert s["compressed_calls"] > STEPS, "%s: one bucket per step or fewer: %s" % (what, s)
    s["traffic"] = state.traffic()
    state.close()  # collective; writes the stats file
    return s


def worker(out_dir):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # torchrun's variables and store
    rank, size = dist.get_rank(), dist.get_world_size()
    results = {}
    for model_name, how, _ in RUNS:
        t0 = time.time()
        results["%s/%s" % (model_name, how)] = train_one(model_name, how, rank, size)
        print("rank %d: %s/%s trained in %.1f s" % (rank, model_name, how, time.time() - t0),
              flush=True)
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)
    return cond


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_stats(stats_files, ranks_out, P):
    """Each rank's hook stats file against what its states counted."""
    total = {"calls": 0, "logical": 0, "wire": 0}
    for r in range(P):
        path = stats_files.get(r)
        if not check(path is not None, "rank %d wrote no stats file" % r):
            continue
        with open(path) as f:
            doc = json.load(f)
        comms = doc["communicators"]
        check(doc.get("source") == "gradcomp.torch" and len(comms) == len(RUNS),
              "rank %d: %d communicators in %s, want %d" % (r, len(comms), path, len(RUNS)))
        for c, (model_name, how, algo) in zip(comms, RUNS):
            what = "rank %d %s/%s" % (r, model_name, how)
            mine = ranks_out[r]["%s/%s" % (model_name, how)]
            dense = c["logical_bytes"] * 2 * (P - 1) // P
            check(c["index"] == RUNS.index((model_name, how, algo)) and c["nranks"] == P and
                  c["rank"] == r, "%s: index/rank/nranks %s" % (what, (c["index"], c["rank"], c["nranks"])))
            check(c["calls_compressed"] == mine["compressed_calls"] and
                  c["logical_bytes"] == mine["compressed_bytes"],
                  "%s: stats file says %d calls, %d B; the state counted %d, %d B" % (
                      what, c["calls_compressed"], c["logical_bytes"], mine["compressed_calls"],
                      mine["compressed_bytes"]))
            check(c["calls_passed"] == 0 and c["pass_reasons"] == {} and c["failed"] is None,
                  "%s: passed %d (%s), failed %s" % (what, c["calls_passed"], c["pass_reasons"],
                                                     c["failed"]))
            check(0 < c["wire_bytes"] < dense and c["wire_bytes"] <= mine["traffic"]["bytes_sent"],
                  "%s: %d wire bytes; dense ring %d, communicator sent %d in all" % (
                      what, c["wire_bytes"], dense, mine["traffic"]["bytes_sent"]))
            check(set(a.split(":")[0] for a in c["algorithms"]) == {algo},
                  "%s: ran %s, want %s" % (what, c["algorithms"], algo))
            buckets = c["buckets"]
            # Every bucket sent something; those of 1024+ elements less than their
            # size (a bucket of a few elements may cost more: oktopk's indices).
            check(len(buckets) > 1 and sum(b["calls"] for b in buckets) == c["calls_compressed"] and
                  sum(b["bytes_out"] for b in buckets) == c["wire_bytes"] and
                  all(b["bytes_out"] > 0 for b in buckets) and
                  all(b["wire_fraction"] < 1 for b in buckets if b["count"] >= 1024),
                  "%s: buckets %s" % (what, buckets))
            total["calls"] += c["calls_compressed"]
            total["logical"] += c["logical_bytes"]
            total["wire"] += c["wire_bytes"]
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--worker", metavar="OUT_DIR")
    args = ap.parse_args()
    ensure_torch()
    if args.worker:
        worker(args.worker)
        return 0
    if not os.path.isdir(FMNIST):
        print("SKIP: no %s (apt-get install dataset-fashion-mnist)" % FMNIST)
        return 77
    build = os.path.abspath(args.build)
    launcher = os.path.join(build, "tools", "gradcomp-launch", "gradcomp-launch")
    P = args.ranks
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ranks")
        os.mkdir(out)
        env = dict(os.environ, LIBGRADCOMP_API=os.path.join(build, "plugin", "libgradcomp-api.so"),
                   GRADCOMP_TIMEOUT_S="30", OMP_NUM_THREADS="1")
        for v in ("GRADCOMP_RANK", "GRADCOMP_NRANKS", "GRADCOMP_BOOTSTRAP", "GRADCOMP_ALGO"):
            env.pop(v, None)
        cmd = [launcher, "--algo", "qsgd", "--bits", "4", "--min-bytes", "0", "--config", "",
               "--stats-dir", os.path.join(tmp, "stats"), "--summary-json",
               os.path.join(tmp, "summary.json"), "--",
               # --redirects/--tee: Debian's torchrun 1.13 under Python 3.11 reads their
               # default 0 as None and fails (Std.from_str); 2 tees the workers' stderr.
               SYSTEM_PYTHON, "-m", "torch.distributed.run", "--nnodes", "1",
               "--redirects", "2", "--tee", "2", "--log_dir", os.path.join(tmp, "logs"),
               "--nproc_per_node", str(P), "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), os.path.abspath(__file__), build,
               "--worker", out]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        print(r.stdout[-4000:])
        print(r.stderr[-6000:])
        if not check(r.returncode == 0, "gradcomp-launch -- torchrun exited %d" % r.returncode):
            return 1
        ranks_out = {}
        for rr in range(P):
            with open(os.path.join(out, "rank%d.json" % rr)) as f:
                ranks_out[rr] = json.load(f)
        files = {}
        for path in glob.glob(os.path.join(tmp, "stats", "run-*.hook.rank*.json")):
            files[int(path.rsplit(".rank", 1)[1].split(".")[0])] = path
        check(not glob.glob(os.path.join(tmp, "stats", "run-*[0-9].rank*.json")),
              "an interposer stats file in a gloo job: %s" % os.listdir(os.path.join(tmp, "stats")))
        total = check_stats(files, ranks_out, P)
        with open(os.path.join(tmp, "summary.json")) as f:
            s = json.load(f)
        want = {"ranks": P, "hook_ranks": P, "communicators": len(RUNS), "calls_passed": 0,
                "calls_compressed": total["calls"], "logical_bytes": total["logical"],
                "wire_bytes": total["wire"]}
        got = {k: s.get(k) for k in want}
        check(got == want, "summary JSON %s, want %s" % (got, want))
        check(s["ratio"] and s["ratio"] > 1.5, "summary ratio %s" % s["ratio"])
        check("with DDP hook communicators" in r.stderr and
              "compressed calls" in r.stderr and "waiting on peers" not in r.stderr,
              "the summary table does not describe the hook's communicators")
    print("%s in %.1f s (%d ranks, %d steps x %d runs; %d buckets compressed over all ranks, ratio %.1fx)"
          % ("PASS" if not failures else "FAIL", time.time() - start, P, STEPS, len(RUNS),
             total["calls"], s["ratio"] or 0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Transformers trained with AdamW through gradcomp.torch's DDP hook: every
algorithm against dense (gloo's own allreduce), seeds, one table.

  python3 examples/pytorch/accuracy_matrix.py --build build --ranks 4 \\
      --seeds 1,2,3 --out docs/results/accuracy-pytorch.md

Models (each small enough for a CPU, every rank one thread):
  vit  a vision transformer (7x7 patches, 2 blocks, width 64, 4 heads) on
       Fashion-MNIST (Debian dataset-fashion-mnist, /usr/share/datasets/
       fashion-mnist); metric: test accuracy on the first --eval-images.
  lm   a character-level transformer LM (2 blocks, width 64, context 64) on
       the licenses Debian's base-files ships (/usr/share/common-licenses,
       every file, sorted); metric: validation bits per character on the
       last 10 % of the text.
Both: AdamW (betas 0.9/0.999, weight decay 0.05), linear warm-up over the
first 10 % of the steps, then cosine decay; each rank its own data shard;
gradients averaged by the hook with GRADCOMP_MIN_BYTES=0 (every bucket) or,
for dense, by gloo (no hook). Each run checks that every rank ends with the
same parameters (wagma excepted: it averages within groups, so ranks' models
differ by design; rank 0's is measured, as for every algorithm).
"""
import argparse
import glob
import gzip
import math
import os
import struct
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist"
TEXTS = "/usr/share/common-licenses"
# Algorithm -> parameters (names without GRADCOMP_); the rest are defaults.
ALGOS = {
    "qsgd": {"BITS": "4"}, "oktopk": {"DENSITY": "0.01"}, "topka": {"DENSITY": "0.01"},
    "gaussiank": {"DENSITY": "0.01"}, "gtopk": {"DENSITY": "0.01"}, "dsa": {"DENSITY": "0.01"},
    "cltk": {"DENSITY": "0.01"}, "sign": {}, "fft": {}, "rbf": {}, "wagma": {},
}


def parse_algo(text):
    """'oktopk' -> its ALGOS parameters; 'oktopk@DENSITY=0.1+TOPK_TAU=8' -> those instead
    (DENSE_STEPS=N: the hook's dense warm-up, GradcompState(dense_steps=N);
    ADAM=momentum|gradient: gradcomp.adam's hook and optimizer instead of AdamW,
    1-bit Adam's frozen variance after DENSE_STEPS, default 30; PRECOND=1: its
    precondition option)."""
    name, _, rest = text.partition("@")
    params = dict(ALGOS.get(name, {}))
    for kv in filter(None, rest.split("+")):
        k, _, v = kv.partition("=")
        params[k] = v
    return name, params


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


class Block(nn.Module):
    def __init__(self, dim, heads, causal):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.causal = causal

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1) if self.causal else None
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    def __init__(self, dim=64, depth=2, heads=4, patch=7):
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(patch * patch, dim)
        self.pos = nn.Parameter(torch.randn(1, (28 // patch) ** 2 + 1, dim) * 0.02)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, False) for _ in range(depth)])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):  # x: B x 28 x 28
        b, p = x.shape[0], self.patch
        x = x.unfold(1, p, p).unfold(2, p, p).reshape(b, -1, p * p)
        x = torch.cat([self.cls.expand(b, -1, -1), self.embed(x)], 1) + self.pos
        return self.head(self.ln(self.blocks(x)[:, 0]))


class CharLM(nn.Module):
    def __init__(self, vocab, dim=64, depth=2, heads=4, context=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, context, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, True) for _ in range(depth)])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, :idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def vit_task(args, rank, size, seed):
    images = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")).float().div_(255)
    labels = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")).long()
    timg = read_idx(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"))[:args.eval_images].float().div_(255)
    tlab = read_idx(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz"))[:args.eval_images].long()
    mean, std = 0.2860, 0.3530
    images, timg = (images - mean) / std, (timg - mean) / std
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    b = args.batch

    def batch(step):
        i = order[(step * size + rank) * b % len(order):][:b]
        return images[i], labels[i]

    def metric(model):
        with torch.no_grad():
            return (model(timg).argmax(1) == tlab).float().mean().item()
    return ViT(), batch, lambda out, y: F.cross_entropy(out, y), metric


def lm_task(args, rank, size, seed):
    text = "".join(open(p, encoding="utf-8", errors="replace").read()
                   for p in sorted(glob.glob(os.path.join(TEXTS, "*"))) if os.path.isfile(p))
    chars = sorted(set(text))
    code = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([code[c] for c in text], dtype=torch.long)
    split = int(len(data) * 0.9)
    train, val = data[:split], data[split:]
    ctx, b = 64, args.batch // 2
    gen = torch.Generator().manual_seed(seed * 1000 + rank)

    def batch(step):
        i = torch.randint(0, len(train) - ctx - 1, (b,), generator=gen)
        x = torch.stack([train[j:j + ctx] for j in i.tolist()])
        y = torch.stack([train[j + 1:j + 1 + ctx] for j in i.tolist()])
        return x, y

    def metric(model):  # validation bits per character, non-overlapping windows
        n = (len(val) - 1) // ctx
        x = val[:n * ctx].reshape(n, ctx)[:args.eval_windows]
        y = val[1:n * ctx + 1].reshape(n, ctx)[:args.eval_windows]
        with torch.no_grad():
            loss = F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
        return loss.item() / math.log(2)
    return CharLM(len(chars)), batch, \
        lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)), metric


def worker(rank, size, job, args, init_file, queue):
    import gradcomp.torch as gct
    try:
        torch.set_num_threads(1)
        model_name, algo, seed = job
        os.environ.update({"GRADCOMP_MIN_BYTES": "0", "GRADCOMP_CONFIG": ""})
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                                world_size=size)
        torch.manual_seed(seed)  # the same initial model on every rank
        net, batch, loss_fn, metric = (vit_task if model_name == "vit" else lm_task)(
            args, rank, size, seed)
        model = DDP(net)
        state, adam = None, None
        if algo != "dense":
            name, params = parse_algo(algo)
            adam = params.pop("ADAM", None)  # gradcomp.adam (hook side), not a library parameter
            warm = int(params.pop("DENSE_STEPS", 30 if adam else 0))  # the hook's dense warm-up
            precond = params.pop("PRECOND", "0") not in ("0", "")
            if adam:
                import gradcomp.adam as gca
                state = gca.AdamState(algo=name, params=params, dense_steps=warm,
                                      betas=(0.9, 0.999), compress=adam, precondition=precond)
                model.register_comm_hook(state, gca.adam_hook)
            else:
                state = gct.GradcompState(algo=name, params=params, dense_steps=warm)
                model.register_comm_hook(state, gct.allreduce_hook)
        decay = [p for n, p in net.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in net.named_parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}]
        if adam:  # Adam's moments live in the hook; the optimizer steps along its direction
            opt = gca.PreconditionedAdamW(groups, lr=args.lr)
        else:
            opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999))
        steps, warm = args.steps[model_name], max(1, args.steps[model_name] // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warm if s < warm else
                                                  0.5 * (1 + math.cos(math.pi * (s - warm) /
                                                                      max(1, steps - warm))))
        start = time.time()
        for step in range(steps):
            x, y = batch(step)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            sched.step()
        seconds = time.time() - start
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
        everyone = [torch.empty_like(flat) for _ in range(size)]
        dist.all_gather(everyone, flat)
        equal = all(torch.equal(e, everyone[0]) for e in everyone)
        net.eval()
        value = metric(net)
        ratio = None
        if state is not None:
            sent = state.traffic()["bytes_sent"]
            dense = state.stats["compressed_bytes"] * 2 * (size - 1) / size
            ratio = dense / sent if sent else None
        queue.put((rank, "ok", (value, equal, seconds, ratio)))
    except BaseException as e:  # noqa: BLE001
        queue.put((rank, "error", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300]
                                              if str(e) else traceback.format_exc())))
    finally:
        queue.close()
        queue.join_thread()
        os._exit(0)


def run_job(job, args, tmp):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    init = os.path.join(tmp, "%s-%s-%d" % job)
    procs = [ctx.Process(target=worker, args=(r, args.ranks, job, args, init, queue))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.time() + args.timeout
    while len(results) < args.ranks and time.time() < deadline:
        try:
            rank, kind, payload = queue.get(timeout=1)
            results[rank] = (kind, payload)
        except Exception:  # noqa: BLE001
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        p.join(2)
        if p.is_alive():
            p.kill()
    errors = [payload for kind, payload in results.values() if kind == "error"]
    if errors or len(results) < args.ranks:
        return {"error": errors[0] if errors else "ranks lost or past %d s" % args.timeout}
    value, equal, seconds, ratio = results[0][1]
    # wagma averages within groups: ranks' models differ by design (rank 0's is measured).
    if not job[1].startswith("wagma") and not all(r[1][1] for r in results.values()):
        return {"error": "parameters differ across ranks"}
    return {"value": value, "seconds": seconds, "ratio": ratio}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build tree with plugin/libgradcomp-api.so")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--models", default="vit,lm")
    ap.add_argument("--algos", default="dense," + ",".join(ALGOS),
                    help="comma-separated; NAME@PARAM=VALUE+PARAM=VALUE overrides parameters")
    ap.add_argument("--batch", type=int, default=32, help="per rank: vit images; lm half as many windows of 64 characters")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--vit-steps", type=int, default=150)
    ap.add_argument("--lm-steps", type=int, default=150)
    ap.add_argument("--eval-images", type=int, default=2000)
    ap.add_argument("--eval-windows", type=int, default=300)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--out", help="write the markdown table here")
    args = ap.parse_args()
    args.steps = {"vit": args.vit_steps, "lm": args.lm_steps}
    os.environ.setdefault("LIBGRADCOMP_API", os.path.join(args.build, "plugin", "libgradcomp-api.so"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    seeds = [int(s) for s in args.seeds.split(",")]
    import tempfile
    results = {}  # (model, algo) -> runs, seed by seed
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(seeds):  # seed-major: a partial run covers every algorithm
            for model in args.models.split(","):
                for algo in args.algos.split(","):
                    r = run_job((model, algo, seed), args, tmp)
                    results.setdefault((model, algo), []).append(r)
                    print("%s %s seed %d: %s" % (model, algo, seed, r), flush=True)
            table = render(results, seeds[:i + 1])
            if args.out:  # rewritten after each seed
                with open(args.out, "w") as f:
                    f.write(table)
    print(table)


def render(results, seeds):
    rows = [(m, a, runs) for (m, a), runs in results.items()]
    metric = {"vit": "test accuracy", "lm": "validation bits/char"}
    dense = {}
    for model, algo, runs in rows:
        if algo == "dense":
            vals = [r["value"] for r in runs if "value" in r]
            dense[model] = sum(vals) / len(vals) if vals else None
    out = ["| model | algorithm | %s | mean | vs dense | compression | s/run |" %
           " | ".join("seed %d" % s for s in seeds),
           "|---|---|%s---|---|---|---|" % ("---|" * len(seeds))]
    for model, algo, runs in rows:
        cells = ["error" if "error" in r else "%.4f" % r["value"] for r in runs]
        vals = [r["value"] for r in runs if "value" in r]
        mean = sum(vals) / len(vals) if vals else None
        delta = "" if mean is None or dense.get(model) is None or algo == "dense" else \
            "%+.4f" % (mean - dense[model])
        ratios = [r["ratio"] for r in runs if r.get("ratio")]
        secs = [r["seconds"] for r in runs if "seconds" in r]
        out.append("| %s (%s) | %s | %s | %s | %s | %s | %s |" % (
            model, metric[model], algo, " | ".join(cells), "" if mean is None else "%.4f" % mean,
            delta, "%.1fx" % (sum(ratios) / len(ratios)) if ratios else "",
            "%.0f" % (sum(secs) / len(secs)) if secs else ""))
    errors = ["- %s %s: %s" % (m, a, r["error"]) for m, a, runs in rows for r in runs[:1] if "error" in r]
    return "\n".join(out) + "\n" + ("\nErrors (first seed):\n" + "\n".join(errors) + "\n" if errors else "")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where a compressed gradient goes, per parameter tensor: the diagnosis
behind gradcomp.adam (docs/results/accuracy.md, "Top-k and sign with
AdamW"). Trains one model of accuracy_matrix.py (same data, model, AdamW,
schedule) with the hook, and beside each bucket's compressed average also
takes the exact average (gloo; diagnosis only). Per parameter tensor, over
the run:

  coverage   fraction of its coordinates the compressed average ever made non-zero
  steps      mean fraction of steps a coordinate was non-zero
  applied    |sum_t compressed_t| / |sum_t exact_t| (L2): how much of the run's
             total gradient reached the optimizer (the rest is in error
             feedback's residuals, or lost without it)
  cos        cosine between sum_t compressed_t and sum_t exact_t
  rms        the exact gradient's RMS (the tensor's gradient scale)

  python3 examples/pytorch/topk_coverage.py --build build --model vit --algo oktopk
  python3 examples/pytorch/topk_coverage.py --build build --model vit \
      --algo oktopk@ADAM=gradient+PRECOND=1     # gradcomp.adam: what it compresses

With ADAM=... (gradcomp.adam, as in accuracy_matrix.py) the columns are over
the steps after the dense warm-up, of what adam_hook hands to the compressed
allreduce (the gradient, or the local momentum; divided by the frozen
sqrt(v_hat) with PRECOND=1), and the optimizer is gradcomp.adam's.
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import accuracy_matrix as am  # noqa: E402

torch, dist, mp, DDP = am.torch, am.dist, am.mp, am.DDP


def worker(rank, size, args, init, queue):
    import math
    import gradcomp.torch as gct
    try:
        torch.set_num_threads(1)
        os.environ.update({"GRADCOMP_MIN_BYTES": "0", "GRADCOMP_CONFIG": ""})
        dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=size)
        torch.manual_seed(args.seed)
        net, batch, loss_fn, metric = (am.vit_task if args.model == "vit" else am.lm_task)(
            args, rank, size, args.seed)
        names = {p: n for n, p in net.named_parameters()}
        model = DDP(net)
        name, params = am.parse_algo(args.algo)
        adam = params.pop("ADAM", None)
        warm = int(params.pop("DENSE_STEPS", 30 if adam else 0))
        precond = params.pop("PRECOND", "0") not in ("0", "")
        if adam:
            import gradcomp.adam as gca
            state = gca.AdamState(algo=name, params=params, dense_steps=warm, compress=adam,
                                  precondition=precond)
        else:
            state = gct.GradcompState(algo=name, params=params, dense_steps=warm)
        acc = {}  # parameter -> [sum compressed, sum exact, ever non-zero, non-zero steps, sum exact^2]
        counted = [0]

        def hook(st, bucket):
            if st.step < st.dense_steps:
                return gct.allreduce_hook(st, bucket)
            if bucket.is_last():
                counted[0] += 1
            exact = bucket.buffer().clone()
            dist.all_reduce(exact)  # diagnosis only: the exact average beside it
            exact.div_(size)
            fut = gct.allreduce_hook(st, bucket)

            def record(f):
                out = f.value()
                at = 0
                for p in bucket.parameters():
                    n = p.numel()
                    c, e = out[at:at + n], exact[at:at + n]
                    a = acc.setdefault(p, [torch.zeros(n), torch.zeros(n), torch.zeros(n, dtype=torch.bool),
                                           torch.zeros(n), torch.zeros(n)])
                    a[0] += c
                    a[1] += e
                    a[2] |= c != 0
                    a[3] += (c != 0).float()
                    a[4] += e * e
                    at += n
                return out
            return fut.then(record)
        decay = [p for p in net.parameters() if p.dim() >= 2]
        rest = [p for p in net.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}]
        if adam:  # record what adam_hook hands to the compressed allreduce
            gca.allreduce_hook = hook
            model.register_comm_hook(state, gca.adam_hook)
            opt = gca.PreconditionedAdamW(groups, lr=args.lr)
        else:
            model.register_comm_hook(state, hook)
            opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999))
        steps, warm = args.steps, max(1, args.steps // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warm if s < warm else
                                                  0.5 * (1 + math.cos(math.pi * (s - warm) /
                                                                      max(1, steps - warm))))
        for step in range(steps):
            x, y = batch(step)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            sched.step()
        net.eval()
        rows = []
        for p, (c, e, ever, nz, e2) in acc.items():
            cos = torch.dot(c, e) / (c.norm() * e.norm() + 1e-30)
            n = max(1, counted[0])
            rows.append((names[p], p.numel(), ever.float().mean().item(), (nz / n).mean().item(),
                         (c.norm() / (e.norm() + 1e-30)).item(), cos.item(),
                         (e2.sum() / (n * p.numel())).sqrt().item()))
        queue.put((rank, "ok", (metric(net), rows, counted[0])))
    except BaseException as e:  # noqa: BLE001
        import traceback
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        queue.close()
        queue.join_thread()
        os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="vit")
    ap.add_argument("--algo", default="oktopk")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-images", type=int, default=2000)
    ap.add_argument("--eval-windows", type=int, default=300)
    args = ap.parse_args()
    os.environ.setdefault("LIBGRADCOMP_API", os.path.join(args.build, "plugin", "libgradcomp-api.so"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=worker, args=(r, args.ranks, args, os.path.join(tmp, "init"), queue))
                 for r in range(args.ranks)]
        for p in procs:
            p.start()
        results = dict((r, (k, v)) for r, k, v in (queue.get(timeout=900) for _ in procs))
        for p in procs:
            p.join(5)
    kind, payload = results[0]
    if kind != "ok":
        print(payload)
        return 1
    value, rows, counted = payload
    print("%s %s seed %d, %d steps (%d compressed), %d ranks: metric %.4f" % (
        args.model, args.algo, args.seed, args.steps, counted, args.ranks, value))
    print("| parameter | elements | coverage | steps | applied | cos | rms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.3f | %.4f | %.3f | %.3f | %.2e |" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())

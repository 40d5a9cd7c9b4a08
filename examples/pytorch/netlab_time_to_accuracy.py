#!/usr/bin/env python3
"""One rank of the character LM of accuracy_matrix.py, for time to accuracy
on emulated hosts (issue 43, part 4): run it under tools/netlab/netlab.sh
--ranks, which starts one copy per network namespace with GRADCOMP_RANK,
GRADCOMP_NRANKS and GRADCOMP_BOOTSTRAP=<host 0>:<port>.

  NETLAB_BUILD=build tools/netlab/netlab.sh -n 4 --rate 1gbit --ranks -- \\
      python3 examples/pytorch/netlab_time_to_accuracy.py --algo qsgd --steps 300 \\
      --eval-every 20 --out /tmp/qsgd.json

The process group is gloo over TCP on the lab's links (MASTER_ADDR = host 0,
the bootstrap port + 1, GLOO_SOCKET_IFNAME = the lab device); --algo dense is
gloo's own allreduce, anything else gradcomp.torch's hook with the
accuracy_matrix parameters (oktopk at density 0.01, qsgd 4 bit; NAME@K=V+...
as there). Every --eval-every steps all ranks stop their clocks, rank 0
measures validation bits per character and the ranks meet at a barrier, so
"train_s" is training time only (forward, backward, communication, the
optimizer). Rank 0 writes one JSON object: the curve [(step, train_s, bpc)],
the bytes gradcomp sent, and whether all ranks ended with equal parameters.
time_to_accuracy.py reads several and prints the table.
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import accuracy_matrix as am  # noqa: E402  (the models and data of the matrix)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", default="dense")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-windows", type=int, default=300)
    ap.add_argument("--out", required=True, help="rank 0 writes its JSON here")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build"),
                    help="build tree with plugin/libgradcomp-api.so (unless LIBGRADCOMP_API is set)")
    args = ap.parse_args()
    os.environ.setdefault("LIBGRADCOMP_API", os.path.join(os.path.abspath(args.build), "plugin",
                                                          "libgradcomp-api.so"))

    rank, size = int(os.environ["GRADCOMP_RANK"]), int(os.environ["GRADCOMP_NRANKS"])
    host, port = os.environ["GRADCOMP_BOOTSTRAP"].rsplit(":", 1)
    os.environ.update({"MASTER_ADDR": host, "GRADCOMP_MIN_BYTES": "0", "GRADCOMP_CONFIG": ""})
    if "NETLAB_DEV" in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NETLAB_DEV"]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (host, int(port) + 1),
                            rank=rank, world_size=size)
    torch.manual_seed(args.seed)  # the same initial model on every rank
    net, batch, loss_fn, metric = am.lm_task(args, rank, size, args.seed)
    model = DDP(net)
    state = None
    if args.algo != "dense":
        import gradcomp.torch as gct
        name, params = am.parse_algo(args.algo)
        warm = int(params.pop("DENSE_STEPS", 0))
        state = gct.GradcompState(algo=name, params=params, dense_steps=warm)
        model.register_comm_hook(state, gct.allreduce_hook)
    decay = [p for p in net.parameters() if p.dim() >= 2]
    rest = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999))
    steps, warm = args.steps, max(1, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else
        0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))

    curve, train_s = [], 0.0
    dist.barrier()
    for step in range(steps):
        t0 = time.time()
        x, y = batch(step)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        sched.step()
        train_s += time.time() - t0
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            if rank == 0:
                net.eval()
                curve.append((step + 1, round(train_s, 4), metric(net)))
                net.train()
            dist.barrier()  # nobody's clock runs while rank 0 evaluates
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    if rank == 0:
        out = {"algo": args.algo, "ranks": size, "steps": steps, "seed": args.seed,
               "rate": os.environ.get("NETLAB_RATE", ""), "curve": curve,
               "equal": all(torch.equal(e, everyone[0]) for e in everyone),
               "gradcomp_bytes_sent": state.traffic()["bytes_sent"] if state else None,
               "bucket_bytes": state.stats["compressed_bytes"] if state else None}
        with open(args.out, "w") as f:
            json.dump(out, f)
        print(json.dumps(out))
    if state is not None:
        state.close()  # collective: after every rank's last step
    # Torch 1.13 with gloo sometimes aborted a rank at interpreter exit
    # ("terminate called without an active exception", dense runs too) when
    # the group was left to the interpreter's teardown.
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

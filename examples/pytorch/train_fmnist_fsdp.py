#!/usr/bin/env python3
"""Sharded training (PyTorch FSDP2, fully_shard) of a small CNN on Fashion-MNIST.

The FSDP2 twin of train_fmnist.py: the same data, model, flags and output,
the model sharded with fully_shard (each layer, then the root) instead of
wrapped in DDP. FSDP2 all-gathers the parameters for each forward and
backward and reduce-scatters the gradients, one ncclReduceScatter per layer
and step through ProcessGroupNCCL, which is what gradcomp compresses when it
is preloaded (LD_PRELOAD=libgradcomp.so, GRADCOMP_RS_ALGO; docs/usage.md,
"Sharded training"). The script does not import gradcomp.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
      examples/pytorch/train_fmnist_fsdp.py --epochs 2

Needs FSDP2: torch.distributed.fsdp.fully_shard (torch >= 2.6), or
torch.distributed._composable.fsdp.fully_shard (torch 2.4 and 2.5). On an
older PyTorch (Debian 12 has 1.13) it prints why on stderr and every rank
exits with status 3 before creating a process group (torch.distributed.run
then reports the workers' exit code 3); train_fmnist.py (DDP) runs there.
Status 3 also when --reduce-op sum is asked of an FSDP2 that cannot force
sum reductions. 2: bad arguments.

Reductions gradcomp can compress: with fp32 or bf16 gradients (--reduce-dtype)
and no divide factor set, FSDP2 reduce-scatters with ReduceOp.AVG, i.e.
ncclAvg, and divides nothing itself (FSDP2 from 2.4 on). This script
never calls set_gradient_divide_factor (set_reduce_scatter_divide_factor in
2.6): a factor other than the world size makes FSDP2 use
ncclRedOpCreatePreMulSum, which gradcomp passes through, as it does fp16
reductions (FSDP2 pre/post-divides those around an ncclSum). --reduce-op sum
asks FSDP2 for ncclSum plus its own division afterwards
(set_force_sum_reduction_for_comms); gloo has no AVG, so on the CPU `auto`
means sum.

Each epoch every rank takes its share of one permutation of the training set
(the same on every rank), so all ranks run the same number of steps. Rank 0
prints one line per epoch; at the end every rank prints
  RESULT {"rank": R, "accuracy": A, "steps": N, "step_ms": T, "params_sha256": D,
          "sharding": "fully_shard", "reduce_op": "avg", "reduce_dtype": "float32", ...}
with the test-set accuracy, the mean wall time per training step, and a digest
of the full (all-gathered) parameters.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics
EXIT_UNSUPPORTED = 3  # this PyTorch cannot run what was asked (no FSDP2, no forced sum)


def read_idx(path):
    """An IDX file (optionally gzipped) as a uint8 tensor of its dimensions."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_split(folder, prefix, device):
    images = read_idx(os.path.join(folder, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(folder, prefix + "-labels-idx1-ubyte.gz"))
    x = (images.float().div_(255).sub_(MEAN).div_(STD)).unsqueeze(1)
    return x.to(device), labels.long().to(device)


class Net(nn.Module):
    """train_fmnist.py's CNN; each of the four layers becomes one FSDP2 unit."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def unsupported(why):
    """Exit EXIT_UNSUPPORTED with one line on stderr (every rank, before any collective)."""
    print("train_fmnist_fsdp.py: %s" % why, file=sys.stderr, flush=True)
    sys.exit(EXIT_UNSUPPORTED)


def torch_version():
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def import_fsdp2():
    """(fully_shard, MixedPrecisionPolicy, FSDPModule, module name), or exits 3 naming
    what this PyTorch lacks. 2.3 had a prototype under _composable.fsdp whose
    reductions differ: only 2.4 and later are accepted."""
    if torch_version() < (2, 4):
        unsupported("PyTorch %s has no FSDP2 (fully_shard): it needs torch >= 2.4 "
                    "(torch.distributed.fsdp.fully_shard from 2.6, "
                    "torch.distributed._composable.fsdp.fully_shard in 2.4 and 2.5); "
                    "examples/pytorch/train_fmnist.py (DDP) runs on this version"
                    % torch.__version__)
    errors = []
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            mod = __import__(where, fromlist=["fully_shard", "MixedPrecisionPolicy", "FSDPModule"])
            return mod.fully_shard, mod.MixedPrecisionPolicy, mod.FSDPModule, where
        except (ImportError, AttributeError) as e:
            errors.append("%s: %s" % (where, e))
    unsupported("PyTorch %s: no FSDP2 fully_shard found (%s)" % (
        torch.__version__, "; ".join(errors)))


def accuracy(model, x, y, batch=1000):
    """Every rank evaluates the same batches: FSDP2 all-gathers in each forward."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def params_digest(model):
    """SHA-256 of the full parameters. full_tensor() is an all-gather: every rank
    calls it for the same parameters in the same order."""
    h = hashlib.sha256()
    for p in model.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        h.update(full.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder with the four *-idx?-ubyte.gz files")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many steps (0: no limit)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--eval-samples", type=int, default=0,
                   help="test on the first N images (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reduce-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="dtype of the gradient reduce-scatter (MixedPrecisionPolicy.reduce_dtype)")
    p.add_argument("--reduce-op", choices=["auto", "avg", "sum"], default="auto",
                   help="avg: ncclAvg (FSDP2's own choice); sum: ncclSum, FSDP2 divides after; "
                        "auto: avg on NCCL, sum on gloo")
    p.add_argument("--no-reshard-after-forward", action="store_true",
                   help="keep parameters gathered between forward and backward")
    a = p.parse_args()

    # Before any process group: a PyTorch without FSDP2 exits 3 on every rank.
    fully_shard, MixedPrecisionPolicy, FSDPModule, fsdp_from = import_fsdp2()
    from torch.distributed.device_mesh import init_device_mesh

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    reduce_op = a.reduce_op if a.reduce_op != "auto" else ("avg" if cuda else "sum")
    if reduce_op == "avg" and not cuda:
        print("train_fmnist_fsdp.py: gloo has no ReduceOp.AVG: --reduce-op avg needs CUDA and NCCL",
              file=sys.stderr)
        sys.exit(2)
    if reduce_op == "sum" and not hasattr(FSDPModule, "set_force_sum_reduction_for_comms"):
        unsupported("PyTorch %s: FSDPModule has no set_force_sum_reduction_for_comms, so FSDP2 "
                    "cannot be asked for sum reduce-scatters (--reduce-op sum%s)" % (
                        torch.__version__, ", needed on gloo" if not cuda else ""))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    # One-dimensional mesh over every rank: FSDP2 uses the default process
    # group (its NCCL communicator) for both all-gather and reduce-scatter.
    mesh = init_device_mesh(device.type, (world,))

    train_x, train_y = load_split(a.data, "train", device)
    test_x, test_y = load_split(a.data, "t10k", device)
    if a.eval_samples:
        test_x, test_y = test_x[:a.eval_samples], test_y[:a.eval_samples]

    torch.manual_seed(a.seed)
    model = Net().to(device)
    # fp32 or bf16 gradients and no divide factor: FSDP2 reduce-scatters with
    # ncclAvg (or ncclSum with --reduce-op sum), never PreMulSum (module doc).
    mp = MixedPrecisionPolicy(reduce_dtype=getattr(torch, a.reduce_dtype))
    shard = dict(mesh=mesh, mp_policy=mp, reshard_after_forward=not a.no_reshard_after_forward)
    units = [model.conv1, model.conv2, model.fc1, model.fc2]
    for layer in units:
        fully_shard(layer, **shard)
    fully_shard(model, **shard)  # the root: no parameters of its own, it schedules the units
    if reduce_op == "sum":
        for m in model.modules():  # per FSDP unit (the setter is not recursive)
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    steps_per_epoch = len(train_x) // (world * a.batch_size)
    if rank == 0:
        print("train_fmnist_fsdp: %d ranks, %s, torch %s, FSDP2 from %s, %d units + root, "
              "reduce-scatter %s in %s, %d steps per epoch of %d per rank" % (
                  world, dist.get_backend(), torch.__version__, fsdp_from, len(units),
                  "ncclAvg" if reduce_op == "avg" else "sum", a.reduce_dtype, steps_per_epoch,
                  a.batch_size), flush=True)

    steps, train_seconds, acc = 0, 0.0, 0.0
    for epoch in range(a.epochs):
        g = torch.Generator()
        g.manual_seed(a.seed * 1000 + epoch)
        mine = torch.randperm(len(train_x), generator=g)[rank::world].to(device)
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        loss = torch.zeros(())
        for step in range(steps_per_epoch):
            if a.max_steps and steps == a.max_steps:
                break
            idx = mine[step * a.batch_size:(step + 1) * a.batch_size]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        if cuda:
            torch.cuda.synchronize(device)
        train_seconds += time.perf_counter() - start
        acc = accuracy(model, test_x, test_y)
        if rank == 0:
            print("epoch %d: steps %d, last loss %.4f, test accuracy %.4f, %.2f ms/step" % (
                epoch + 1, steps, loss.item(), acc, 1e3 * train_seconds / max(steps, 1)),
                flush=True)
        if a.max_steps and steps == a.max_steps:
            break

    digest = params_digest(model)
    print("RESULT " + json.dumps({
        "rank": rank, "ranks": world, "backend": dist.get_backend(), "epochs": a.epochs,
        "steps": steps, "accuracy": round(acc, 4),
        "step_ms": round(1e3 * train_seconds / max(steps, 1), 3),
        "params_sha256": digest, "sharding": "fully_shard", "fsdp_module": fsdp_from,
        "torch": torch.__version__, "reduce_op": reduce_op, "reduce_dtype": a.reduce_dtype}),
        flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST with PyTorch DDP.

A plain DDP script: it does not import gradcomp. gradcomp reaches it only
from outside, through LD_PRELOAD=libgradcomp.so and GRADCOMP_* variables
(docs/usage.md), which is what this example demonstrates. Launch it with
torch.distributed.run (torchrun); it uses NCCL on CUDA devices when there are
any, else gloo on the CPU. Works with PyTorch 1.13 and 2.x.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
      examples/pytorch/train_fmnist.py --epochs 2

Each epoch every rank takes its share of one permutation of the training set
(the same on every rank), so all ranks run the same number of steps. Rank 0
prints one line per epoch; at the end every rank prints
  RESULT {"rank": R, "accuracy": A, "steps": N, "step_ms": T, "params_sha256": D, ...}
with the test-set accuracy, the mean wall time per training step, and a
digest of the parameters (equal on every rank when the gradients each rank
received were equal).
"""
import argparse
import gzip
import hashlib
import json
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics


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


def accuracy(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def params_digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder with the four *-idx?-ubyte.gz files")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--eval-samples", type=int, default=0, help="test on the first N images (0: all)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    train_x, train_y = load_split(a.data, "train", device)
    test_x, test_y = load_split(a.data, "t10k", device)
    if a.eval_samples:
        test_x, test_y = test_x[:a.eval_samples], test_y[:a.eval_samples]

    torch.manual_seed(a.seed)
    model = Net().to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    steps_per_epoch = len(train_x) // (world * a.batch_size)
    if rank == 0:
        print("train_fmnist: %d ranks, %s, torch %s, %d steps per epoch of %d per rank" % (
            world, dist.get_backend(), torch.__version__, steps_per_epoch, a.batch_size), flush=True)

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
            loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
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
                epoch + 1, steps, loss.item(), acc, 1e3 * train_seconds / max(steps, 1)), flush=True)
        if a.max_steps and steps == a.max_steps:
            break

    print("RESULT " + json.dumps({
        "rank": rank, "ranks": world, "backend": dist.get_backend(), "epochs": a.epochs, "steps": steps,
        "accuracy": round(acc, 4), "step_ms": round(1e3 * train_seconds / max(steps, 1), 3),
        "params_sha256": params_digest(model)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

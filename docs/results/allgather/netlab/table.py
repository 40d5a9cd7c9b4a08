#!/usr/bin/env python3
"""Medians of the interleaved rounds (run.sh): ms per call, speed-up over
gradcomp's dense allgather, and Open MPI's MPI_Allgather beside it; then the
checked runs' wire bytes and #wrong.

table.py [RATE=1gbit] [DIR=this folder]"""
import glob, json, os, re, statistics, sys
rate = sys.argv[1] if len(sys.argv) > 1 else "1gbit"
here = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
times = {}
for path in sorted(glob.glob(os.path.join(here, f"round*_{rate}_*.txt"))):
    name = re.match(rf"round\d+_{rate}_(.+)\.txt", os.path.basename(path)).group(1)
    for line in open(path):
        f = line.split()
        if len(f) > 7 and f[0] == "[0]" and f[1] == "67108864":
            times.setdefault(name, []).append(float(f[6]) / 1000)
        elif line.startswith("{") and '"allgather"' in line:
            times.setdefault(name, []).append(json.loads(line)["time_us"] / 1000)
dense = statistics.median(times["dense"])
goals = {"blockq8": ">= 3.5x", "blockq4": ">= 6x", "mpi-ring": "dense within 1.2x",
         "mpi-default": "dense within 1.2x"}
print(f"| schedule ({rate}) | runs (ms per call) | median ms | dense / median | goal |")
print("|---|---|---:|---:|---|")
for name in ("dense", "blockq8", "blockq4", "fp8", "mpi-default", "mpi-ring"):
    t = times.get(name, [])
    if not t:
        continue
    m = statistics.median(t)
    runs = ", ".join(f"{x:.0f}" for x in t)
    print(f"| {name} | {runs} | {m:.1f} | {dense / m:.2f}x | {goals.get(name, '')} |")
print()
print("| checked run (-c 1) | wire bytes per rank | ratio | #wrong |")
print("|---|--:|--:|--:|")
for path in sorted(glob.glob(os.path.join(here, f"check_{rate}_*.txt"))):
    name = re.match(rf"check_{rate}_(.+)\.txt", os.path.basename(path)).group(1)
    for line in open(path):
        f = line.split()
        if len(f) > 12 and f[0] == "[0]" and f[1] == "67108864":
            print(f"| {name} | {f[9]} | {f[10]} | {f[12]} |")

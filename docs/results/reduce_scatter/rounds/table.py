#!/usr/bin/env python3
"""Medians of the interleaved rounds (run.sh): ms per call and speed-up over dense.

table.py [RATE=1gbit] [DIR=this folder]"""
import glob, os, re, statistics, sys
rate = sys.argv[1] if len(sys.argv) > 1 else "1gbit"
here = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
times = {}
for path in sorted(glob.glob(os.path.join(here, f"round*_{rate}_*.txt"))):
    name = re.match(rf"round\d+_{rate}_(.+)\.txt", os.path.basename(path)).group(1)
    for line in open(path):
        f = line.split()
        if len(f) > 7 and f[0] == "[0]" and f[1] == "67108864":
            times.setdefault(name, []).append(float(f[6]) / 1000)
dense = statistics.median(times["dense"])
print(f"| schedule ({rate}) | runs (ms per call) | median ms | dense / median |")
print("|---|---|---:|---:|")
for name in ("dense", "qsgd4", "oktopk"):
    t = times.get(name, [])
    if not t:
        continue
    m = statistics.median(t)
    runs = ", ".join(f"{x:.0f}" for x in t)
    print(f"| {name} | {runs} | {m:.1f} | {dense / m:.2f}x |")

#!/usr/bin/env python3
"""From which P do the device-resident design's launches and syncs cost more
than the network? Reads gradcomp-sim --gpu-model JSON files (docs/results/
gpu_model*.json) and prints a markdown table per algorithm and P:

  launch+sync  resident launch floors beyond the kernels' own time + host
               syncs, ms per call (the per-step costs the persistent kernel
               does not pay)
  NIC @ R      the busiest rank's wire bytes at link rate R, ms (what the
               network needs at least)
  res - pers   resident minus persistent call time at each rate, ms (what the
               launches and syncs add to the critical path, net of the
               persistent kernel's barriers and flag waits)
  *            the replay's count has another schedule shape than the full
               count (JSON "aligned": false)

usage: gpu_crossover.py FILE.json [FILE.json ...]
"""
import json
import sys


def main(paths):
    rows = []
    for p in paths:
        rows += json.load(open(p))["rows"]
    rates = sorted({r["gbps"] for r in rows if r["algo"] != "nccl ring"})
    key = {}
    for r in rows:
        if r["algo"] != "nccl ring":
            key[(r["algo"], r["P"], r["design"], r["gbps"])] = r
    algos = []
    for r in rows:
        if r["algo"] != "nccl ring" and r["algo"] not in algos:
            algos.append(r["algo"])
    head = "| algorithm | P | launch+sync ms |"
    head += "".join(f" NIC @ {g:g}G ms |" for g in rates)
    head += "".join(f" res - pers @ {g:g}G ms |" for g in rates)
    print(head)
    print("|---|--:|--:|" + "--:|" * (2 * len(rates)))
    for a in algos:
        for P in sorted({k[1] for k in key if k[0] == a}):
            res = key.get((a, P, "resident", rates[0]))
            if res is None:
                continue
            mark = "" if res.get("aligned", True) else "*"
            line = f"| {a} | {P}{mark} | {res['launch_ms'] + res['sync_ms']:.3g} |"
            line += "".join(f" {res['wire_bytes_max'] * 8 / (g * 1e9) * 1e3:.3g} |" for g in rates)
            for g in rates:
                r, p = key.get((a, P, "resident", g)), key.get((a, P, "persistent", g))
                line += f" {r['time_ms'] - p['time_ms']:.3g} |" if r and p else " - |"
            print(line)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

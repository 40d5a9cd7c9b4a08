#!/usr/bin/env python3
"""Time to accuracy from netlab_time_to_accuracy.py's JSON files: per link
rate, each algorithm's training time until rank 0's validation bits per
character first reach the target, against gloo's dense allreduce.

  examples/pytorch/time_to_accuracy.py docs/results/accuracy/pytorch/netlab/*.json

The target of a rate is dense's final value at that rate times (1 + --slack)
(default 0.02: within 2 %), unless --target gives one; a run that never
reaches it shows its best value instead. Times are training time only
(evaluation excluded), measured at the evaluation points, so a time to
target is resolved to --eval-every steps.
"""
import argparse
import json
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--slack", type=float, default=0.02)
    ap.add_argument("--target", type=float)
    args = ap.parse_args()
    runs = defaultdict(dict)
    for path in args.files:
        with open(path) as f:
            r = json.load(f)
        runs[r["rate"]][r["algo"]] = r
    print("| rate | algorithm | target bits/char | time to target (s) | vs dense | final bits/char "
          "| train s (all steps) | s/step | bytes sent by gradcomp / dense ring | ranks equal |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for rate in sorted(runs, key=lambda r: (len(r), r)):
        algos = runs[rate]
        if "dense" not in algos and args.target is None:
            print("%s: no dense run, no target" % rate, file=sys.stderr)
            continue
        target = args.target or algos["dense"]["curve"][-1][2] * (1 + args.slack)
        reach = {}
        for name, r in algos.items():
            reach[name] = next((t for _, t, bpc in r["curve"] if bpc <= target), None)
        for name in sorted(algos, key=lambda a: (a != "dense", a)):
            r = algos[name]
            step, train, final = r["curve"][-1]
            t = reach[name]
            base = reach.get("dense")
            ratio = "%.2fx" % (base / t) if t and base else ""
            if r["gradcomp_bytes_sent"]:
                ring = r["bucket_bytes"] * 2 * (r["ranks"] - 1) / r["ranks"]
                sent = "%.3f" % (r["gradcomp_bytes_sent"] / ring)
            else:
                sent = ""
            print("| %s | %s | %.3f | %s | %s | %.3f | %.1f | %.3f | %s | %s |" % (
                rate, name, target, "%.1f" % t if t is not None else
                "not reached (best %.3f)" % min(c[2] for c in r["curve"]),
                ratio, final, train, train / step, sent, "yes" if r["equal"] else "NO"))


if __name__ == "__main__":
    main()

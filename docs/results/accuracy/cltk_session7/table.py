#!/usr/bin/env python3
# Per-seed final test accuracy (and epoch-2 train loss) of every label here, gap to dense.
import json, glob, os, sys
here = os.path.dirname(os.path.abspath(__file__))
# Usage: table.py [FIRST LAST] (seeds, default 1 5)
seeds = list(range(int(sys.argv[1]), int(sys.argv[2]) + 1)) if len(sys.argv) > 2 else [1, 2, 3, 4, 5]
def get(model, label, s):
    f = os.path.join(here, f"{model}_{label}_s{s}.json")
    if not os.path.exists(f): return None
    try:
        e = json.load(open(f))[-1]
    except (ValueError, IndexError):
        return None  # a run still writing

    return 100 * e["test_acc"], e["train_loss"]
for model in ["mlp", "cnn"]:
    labels = sorted({os.path.basename(f)[len(model)+1:].rsplit("_s", 1)[0] for f in glob.glob(os.path.join(here, model + "_*_s*.json"))})
    labels.sort(key=lambda l: (l != "dense", l != "cltk_before", l))
    print(f"#### {model.upper()}, seeds {seeds[0]}-{seeds[-1]}\n")
    print("| run | " + " | ".join(f"seed {s}" for s in seeds) + " | mean gap | worst gap | within 1.5 | mean train loss |")
    print("|---|" + "---|" * (len(seeds) + 4))
    for l in labels:
        cells, gaps, losses = [], [], []
        for s in seeds:
            r, d = get(model, l, s), get(model, "dense", s)
            if r is None: cells.append("-"); continue
            losses.append(r[1])
            if l == "dense": cells.append(f"{r[0]:.2f}"); continue
            g = r[0] - d[0]; gaps.append(g)
            cells.append(f"{r[0]:.2f} ({g:+.2f})")
        ml = f"{sum(losses)/len(losses):.4f}" if losses else ""
        if gaps:
            print(f"| {l} | " + " | ".join(cells) + f" | {sum(gaps)/len(gaps):+.2f} | {min(gaps):+.2f} | {sum(g >= -1.5 for g in gaps)} / {len(gaps)} | {ml} |")
        else:
            print(f"| {l} | " + " | ".join(cells) + f" | | | | {ml} |")
    print()

#!/usr/bin/env python3
# Over every seed with a dense run: per label the mean gap to dense (+- standard
# error), worst gap, seeds within 1.5, mean epoch-2 train loss and wire MB/epoch.
import json, glob, os, statistics as st
here = os.path.dirname(os.path.abspath(__file__))
def get(model, label, s):
    try:
        return json.load(open(os.path.join(here, f"{model}_{label}_s{s}.json")))[-1]
    except (OSError, ValueError, IndexError):
        return None
print("| model | run | seeds | mean gap | worst gap | within 1.5 | mean train loss | wire MB / epoch |")
print("|---|---|---|---|---|---|---|---|")
for model in ["mlp", "cnn"]:
    labels = sorted({os.path.basename(f)[len(model)+1:].rsplit("_s", 1)[0] for f in glob.glob(os.path.join(here, model + "_*_s*.json"))})
    labels.sort(key=lambda l: (l != "dense", l != "cltk_before", l))
    for l in labels:
        gaps, loss, mb, seeds = [], [], [], []
        for s in range(1, 100):
            r, d = get(model, l, s), get(model, "dense", s)
            if r is None or d is None: continue
            seeds.append(s); loss.append(r["train_loss"]); mb.append(r["wire_bytes"] / 1e6)
            gaps.append(100 * (r["test_acc"] - d["test_acc"]))
        if not seeds: continue
        rng = f"{min(seeds)}-{max(seeds)}" if len(seeds) == max(seeds) - min(seeds) + 1 else ",".join(map(str, seeds))
        if l == "dense":
            print(f"| {model.upper()} | {l} | {rng} | | | | {st.mean(loss):.4f} | {st.mean(mb):.2f} |")
        else:
            se = st.stdev(gaps) / len(gaps) ** 0.5 if len(gaps) > 1 else 0
            print(f"| {model.upper()} | {l} | {rng} | {st.mean(gaps):+.2f} +- {se:.2f} | {min(gaps):+.2f} | {sum(g >= -1.5 for g in gaps)} / {len(gaps)} | {st.mean(loss):.4f} | {st.mean(mb):.2f} |")

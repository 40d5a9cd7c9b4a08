#!/usr/bin/env python3
# Issue 42 part 4: per-seed test accuracy of each ZeRO-3 parameter allgather
# (run.sh) and its gap to the dense allgather at the same seed, against the
# issue's bands (points); the allgather's compression (dense's ag_wire_bytes
# over the row's) and the training loss (mean over seeds, largest excess over
# dense at one seed). Usage: table.py [SEEDS...] (default 1 2 3 4 5).
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
seeds = [int(s) for s in sys.argv[1:]] or [1, 2, 3, 4, 5]
rows = [("dense", "dense allgather", None), ("int8", "blockq int8", 0.5),
        ("int4", "blockq int4", 1.5), ("fp8", "cast fp8 (e4m3)", 1.5),
        ("int8qsgd4", "blockq int8 + qsgd 4 bit reduce-scatter", 1.5)]

def last(model, label, s):
    try:
        e = json.load(open(os.path.join(here, f"{model}_{label}_s{s}.json")))[-1]
    except (OSError, ValueError, IndexError):
        return None  # missing or still writing
    return e if e.get("epoch") == 1 else None

for model in ["mlp", "cnn"]:
    print(f"#### {model.upper()}, seeds {seeds[0]}-{seeds[-1]} (test accuracy %, gap to dense)\n")
    print("| allgather | " + " | ".join(f"seed {s}" for s in seeds) +
          " | mean gap | worst gap | band | seeds within | ag compression | train loss (worst excess) |")
    print("|---|" + "---|" * (len(seeds) + 6))
    for label, name, band in rows:
        cells, gaps, ratios, losses = [], [], [], []
        for s in seeds:
            r, d = last(model, label, s), last(model, "dense", s)
            if r is None or d is None:
                cells.append("-")
                continue
            ra, da = 100 * r["test_acc"], 100 * d["test_acc"]
            ratios.append(d["ag_wire_bytes"] / r["ag_wire_bytes"])
            losses.append((r["train_loss"], r["train_loss"] - d["train_loss"]))
            if band is None:
                cells.append(f"{ra:.2f}")
            else:
                gaps.append(ra - da)
                cells.append(f"{ra:.2f} ({ra - da:+.2f})")
        tail = (f" | {sum(gaps) / len(gaps):+.2f} | {min(gaps):+.2f} | {band:g} | "
                f"{sum(g >= -band for g in gaps)} / {len(gaps)}") if gaps else " | | | |"
        comp = f"{sum(ratios) / len(ratios):.2f}x" if ratios else ""
        loss = (f"{sum(l for l, _ in losses) / len(losses):.4f}" +
                ("" if band is None else f" ({max(x for _, x in losses):+.4f})")) if losses else ""
        print(f"| {name} | " + " | ".join(cells) + tail + f" | {comp} | {loss} |")
    print()

# Follow-up (run_fix.sh), CNN: int4 with a scale per 64 elements, and the
# test accuracy of the exact fp32 masters beside the compressed parameters'.
fix = [("int4b64", "blockq int4, --ag-block 64", "test_acc"),
       ("int4b32", "blockq int4, --ag-block 32", "test_acc"),
       ("int4pt", "blockq int4, a bucket per tensor (blocks never mix tensors)", "test_acc"),
       ("int4m", "blockq int4: exact masters evaluated", "test_acc_master"),
       ("fp8m", "cast fp8: exact masters evaluated", "test_acc_master")]
if any(last("cnn", label, s) for label, _, _ in fix for s in seeds):
    print(f"#### CNN follow-up (run_fix.sh), seeds {seeds[0]}-{seeds[-1]} (test accuracy %, gap to dense)\n")
    print("| run | " + " | ".join(f"seed {s}" for s in seeds) + " | mean gap | worst gap | ag compression |")
    print("|---|" + "---|" * (len(seeds) + 3))
    for label, name, key in fix:
        cells, gaps, ratios = [], [], []
        for s in seeds:
            r, d = last("cnn", label, s), last("cnn", "dense", s)
            if r is None or d is None or key not in r:
                cells.append("-")
                continue
            ra, da = 100 * r[key], 100 * d["test_acc"]
            gaps.append(ra - da)
            ratios.append(d["ag_wire_bytes"] / r["ag_wire_bytes"])
            cells.append(f"{ra:.2f} ({ra - da:+.2f})")
        tail = f" | {sum(gaps) / len(gaps):+.2f} | {min(gaps):+.2f}" if gaps else " | |"
        comp = f"{sum(ratios) / len(ratios):.2f}x" if ratios else ""
        print(f"| {name} | " + " | ".join(cells) + tail + f" | {comp} |")
    print()

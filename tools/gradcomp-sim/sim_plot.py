#!/usr/bin/python3
"""sim_plot.py OUT_PNG SWEEP_JSON...: bytes sent per rank (max) against P for
every algorithm in the gradcomp-sim sweep files, raw and per selected element
(bytes / k), with the Ok-Topk Table 1 terms (8k(P-1) and 24k(P-1)/P bytes).

When the files hold two rows of an algorithm at the same P with different k
(a sweep at --count C and one at C/2 with half the --mem-budget), a third
panel shows the marginal volume (sent(k1) - sent(k2)) / (k1 - k2): bytes per
selected element with the per-message framing (constant in k) cancelled,
which is what the table's bandwidth terms count."""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(argv):
    out, rows = argv[1], []
    for path in argv[2:]:
        rows += json.load(open(path))["rows"]
    algos = sorted({r["algo"] for r in rows})
    slopes = marginal(rows)
    fig, axes = plt.subplots(1, 3 if slopes else 2, figsize=(18 if slopes else 12, 4.5))
    a1, a2 = axes[0], axes[1]
    for algo in algos:
        rs = sorted((r for r in rows if r["algo"] == algo), key=lambda r: (r["P"], -r["k"]))
        rs = [r for i, r in enumerate(rs) if i == 0 or rs[i - 1]["P"] != r["P"]]  # largest k
        ps = [r["P"] for r in rs]
        a1.plot(ps, [r["sent_max"] for r in rs], "o-", label=algo)
        a2.plot(ps, [r["sent_max"] / r["k"] for r in rs], "o-", label=f"{algo} (simulated)")
    ps = sorted({r["P"] for r in rows})
    for ax in axes[1:]:
        ax.plot(ps, [8 * (p - 1) for p in ps], "k--", label="TopkA table: 8(P-1) B/elem")
        ax.plot(ps, [24 * (p - 1) / p for p in ps], "k:", label="Ok-Topk table bound: 24(P-1)/P")
        ax.plot(ps, [8 * (p - 1) / p for p in ps], "k-.", lw=0.8,
                label="Ok-Topk table: 8(P-1)/P")
    if slopes:
        for algo in sorted(slopes):
            pts = slopes[algo]
            axes[2].plot([p for p, _ in pts], [v for _, v in pts], "o-", label=algo)
        axes[2].set_ylabel("marginal bytes sent per rank per selected element")
        axes[2].set_title("d(sent)/dk between the two counts (framing cancelled)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("P (simulated ranks)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    a1.set_ylabel("bytes sent per rank per allreduce (max)")
    a1.set_title("volume at the row's count (see JSON: count per P)")
    a2.set_ylabel("bytes sent per rank / k")
    a2.set_title("volume per selected element k")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    for algo, pts in sorted(slopes.items()):
        print(algo, " ".join(f"P={p}:{v:.1f}" for p, v in pts))


def marginal(rows):
    """{algo: [(P, bytes per extra selected element)]} where two k exist."""
    out = {}
    for algo in sorted({r["algo"] for r in rows}):
        for P in sorted({r["P"] for r in rows if r["algo"] == algo}):
            rs = sorted((r for r in rows if r["algo"] == algo and r["P"] == P),
                        key=lambda r: r["k"])
            if len(rs) >= 2 and rs[-1]["k"] > rs[0]["k"]:
                hi, lo = rs[-1], rs[0]
                out.setdefault(algo, []).append(
                    (P, (hi["sent_max"] - lo["sent_max"]) / (hi["k"] - lo["k"])))
    return out


if __name__ == "__main__":
    main(sys.argv)

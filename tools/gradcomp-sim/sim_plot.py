#!/usr/bin/python3
"""sim_plot.py OUT_PNG SWEEP_JSON...: bytes sent per rank (max) against P for
every algorithm in the gradcomp-sim sweep files, raw and per selected element
(bytes / k), with the Ok-Topk Table 1 terms (8k(P-1) and 24k(P-1)/P bytes)."""
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
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for algo in algos:
        rs = sorted((r for r in rows if r["algo"] == algo), key=lambda r: r["P"])
        ps = [r["P"] for r in rs]
        a1.plot(ps, [r["sent_max"] for r in rs], "o-", label=algo)
        a2.plot(ps, [r["sent_max"] / r["k"] for r in rs], "o-", label=f"{algo} (simulated)")
    ps = sorted({r["P"] for r in rows})
    a2.plot(ps, [8 * (p - 1) for p in ps], "k--", label="TopkA table: 8(P-1) B/elem")
    a2.plot(ps, [24 * (p - 1) / p for p in ps], "k:", label="Ok-Topk table bound: 24(P-1)/P")
    for ax in (a1, a2):
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


if __name__ == "__main__":
    main(sys.argv)

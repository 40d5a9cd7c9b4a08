#!/usr/bin/env python3
"""lab_plot.py LAB_JSON PNG: one panel per (P, rate) of a gradcomp-lab result:
time per allreduce against buffer size for every configuration (log-log),
MPI rows dashed, and each row's physical bound as a dotted line of the same
colour. With a single size per panel it draws bars instead."""
import json
import sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    rows = [r for r in json.load(open(src))["rows"] if "time_s" in r]
    panels = defaultdict(list)
    for r in rows:
        panels[(r["ranks"], r["rate_bps"], r["rate"])].append(r)
    keys = sorted(panels)
    if not keys:
        print("lab_plot.py: no timed rows to plot", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 5), squeeze=False)
    for ax, key in zip(axes[0], keys):
        series = defaultdict(list)
        for r in panels[key]:
            series[r["label"]].append(r)
        sizes = {r["size_bytes"] for r in panels[key]}
        if len(sizes) == 1:
            labels = sorted(series, key=lambda l: -series[l][0]["time_s"])
            t = [series[l][0]["time_s"] * 1e3 for l in labels]
            b = [series[l][0]["bound_s"] * 1e3 for l in labels]
            y = range(len(labels))
            ax.barh(y, t, color=["tab:gray" if l.startswith("mpi") else "tab:blue" for l in labels],
                    label="measured")
            ax.scatter(b, y, marker="|", s=300, color="k", label="physical bound", zorder=3)
            ax.set_yticks(list(y))
            ax.set_yticklabels(labels)
            ax.set_xscale("log")
            ax.set_xlabel(f"ms per allreduce, {next(iter(sizes)) / 2**20:.0f} MiB float32")
        else:
            for label, rs in sorted(series.items()):
                rs.sort(key=lambda r: r["size_bytes"])
                x = [r["size_bytes"] / 2**20 for r in rs]
                line, = ax.plot(x, [r["time_s"] * 1e3 for r in rs], "--" if label.startswith("mpi") else "-",
                                marker="o", label=label)
                ax.plot(x, [r["bound_s"] * 1e3 for r in rs], ":", color=line.get_color())
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("buffer (MiB, float32); dotted: physical bound")
            ax.set_ylabel("ms per allreduce")
        ax.set_title(f"P={key[0]}, {key[2]} links (emulated, netlab)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=80)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: lab_plot.py LAB_JSON PNG")
    sys.exit(main(sys.argv[1], sys.argv[2]))

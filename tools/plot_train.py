#!/usr/bin/python3
"""Plot gradcomp-train -J results: test accuracy against epoch and against
cumulative wall time, one line per JSON file, both panels in one PNG.

usage: plot_train.py [-o OUT.png] [--label NAME ...] RUN.json [RUN.json ...]

Each JSON file is the array gradcomp-train writes (fields epoch, train_loss,
test_acc, wall_s, comm_s, wire_bytes; wall_s is per epoch). Needs Debian's
python3-matplotlib.
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        epochs = json.load(f)
    if not isinstance(epochs, list) or not epochs:
        raise ValueError(f"{path}: expected a non-empty JSON array of epoch objects")
    for e in epochs:
        for key in ("epoch", "test_acc", "wall_s"):
            if key not in e:
                raise ValueError(f"{path}: epoch object without '{key}': {e}")
    return epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="gradcomp-train -J files")
    parser.add_argument("-o", "--output", default="train.png", help="PNG to write")
    parser.add_argument("--label", action="append", default=[],
                        help="legend entry per file, in order (default: file name)")
    parser.add_argument("--title", default="gradcomp-train, Fashion-MNIST")
    args = parser.parse_args()
    if args.label and len(args.label) != len(args.runs):
        parser.error(f"{len(args.label)} --label for {len(args.runs)} files")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        sys.exit(f"plot_train.py: matplotlib missing for {sys.executable}; install the Debian "
                 "package python3-matplotlib and run with /usr/bin/python3")

    try:
        runs = [load(p) for p in args.runs]
    except (OSError, ValueError) as err:
        sys.exit(f"plot_train.py: {err}")

    fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for i, (path, epochs) in enumerate(zip(args.runs, runs)):
        label = args.label[i] if args.label else os.path.splitext(os.path.basename(path))[0]
        acc = [100.0 * e["test_acc"] for e in epochs]
        elapsed, total = [], 0.0
        for e in epochs:
            total += e["wall_s"]
            elapsed.append(total)
        by_epoch.plot([e["epoch"] for e in epochs], acc, marker="o", label=label)
        by_time.plot(elapsed, acc, marker="o", label=label)
    by_epoch.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_epoch.set_xlabel("epoch")
    by_epoch.set_ylabel("test accuracy (%)")
    by_time.set_xlabel("training wall time (s, evaluation excluded)")
    for ax in (by_epoch, by_time):
        ax.grid(True, alpha=0.3)
    by_epoch.legend()
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

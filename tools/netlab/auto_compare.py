#!/usr/bin/env python3
"""auto_compare.py: GRADCOMP_ALGO=auto against every fixed candidate.

  auto_compare.py loopback --build BUILD --out FILE [--sizes 1M,16M,100M] [--ranks 4]
        [--iters 3] [--warmup 64]
      runs gradcomp-bench --ranks P (UCX shared memory on this machine) for
      dense, qsgd 8 bit, qsgd 4 bit, oktopk d=0.01 and auto, one invocation per
      configuration and size (auto calibrates in each), and writes the rows
      in gradcomp-lab's format (rate "loopback"). Every row warms up with
      --warmup calls, enough for auto's trials and re-checks (at most 16
      calls per tried candidate), so all are timed after the same number of
      calls (gradcomp-lab does the same with --auto-warmup).
  auto_compare.py table LAB.json [LAB.json ...]
      prints one markdown table per rate: ms per allreduce of each
      configuration (the mean over the files that measured it, e.g. two lab
      runs in opposite orders; the spread in parentheses when they differ by
      more than 10%), what auto chose, auto / best fixed and auto / dense, and
      whether the goals hold (auto within 10% of the best fixed candidate,
      never more than 5% slower than dense; on loopback: dense chosen or
      within 10% of dense).
"""
import argparse
import json
import os
import re
import subprocess
import sys

CONFIGS = [  # (label, algo, flags): the fixed candidates of the default list, then auto
    ("dense", "dense", []),
    ("qsgd 8 bit", "qsgd", ["--bits", "8"]),
    ("qsgd 4 bit", "qsgd", ["--bits", "4"]),
    ("oktopk d=0.01", "oktopk", ["--density", "0.01"]),
    ("auto", "auto", []),
]
FIXED = [c[0] for c in CONFIGS if c[0] != "auto"]


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip(), re.I)
    if not m:
        raise SystemExit(f"auto_compare: size '{text}': expected e.g. 1M, 100M")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def loopback(args):
    bench = os.path.join(os.path.abspath(args.build), "tools", "gradcomp-bench", "gradcomp-bench")
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        for label, algo, flags in CONFIGS:
            out = args.out + ".tmp.json"
            warmup = args.warmup
            cmd = [bench, "--ranks", str(args.ranks), "--algo", algo, *flags, "-b", str(size), "-e",
                   str(size), "-n", str(args.iters), "-w", str(warmup), "-c", "0", "-J", out]
            print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
            if rc != 0 or not os.path.exists(out):
                rows.append({"label": label, "algo": algo, "ranks": args.ranks, "size_bytes": size,
                             "rate": "loopback", "error": f"exit {rc}"})
                continue
            r = json.load(open(out))[0]
            os.unlink(out)
            row = {"impl": "gradcomp", "label": label, "algo": algo, "flags": " ".join(flags),
                   "ranks": args.ranks, "rate": "loopback", "size_bytes": size,
                   "time_s": r["time_us"] * 1e-6, "wire_bytes": r["wire_bytes_max"]}
            if algo == "auto":
                row.update(choice=r["choice"], choices=r.get("choices", ""))
            rows.append(row)
            print(f"{label:<14} {size:>10} B {row['time_s'] * 1e3:10.1f} ms {row.get('choice', '')}",
                  file=sys.stderr, flush=True)
    doc = {"format": "gradcomp-lab/1", "iters": args.iters, "warmup": args.warmup,
           "auto_warmup": args.warmup, "same_warmup": True, "nproc": os.cpu_count(), "rows": rows}
    json.dump(doc, open(args.out, "w"), indent=1)
    return 0


def size_text(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def table(args):
    # Repeated (rate, size, label) rows: the mean time, and every choice.
    merged = {}
    for path in args.files:
        doc = json.load(open(path))
        if not doc.get("same_warmup"):
            # Before: fixed rows warmed up --warmup calls, auto --auto-warmup.
            print(f"Note: {path}: fixed rows had {doc.get('warmup')} warm-up calls, auto "
                  f"{doc.get('auto_warmup')} (not timed after the same number of calls).")
        for r in doc["rows"]:
            key = (r["rate"], r["size_bytes"], r.get("label"))
            m = merged.setdefault(key, dict(r, times=[], choice_list=[]))
            if "time_s" in r:
                m["times"].append(r["time_s"])
            if r.get("choice"):
                m["choice_list"].append(r["choice"])
    rows = []
    for m in merged.values():
        if m["times"]:
            m["time_s"] = sum(m["times"]) / len(m["times"])
        else:
            m.pop("time_s", None)
        if m["choice_list"]:
            m["choice"] = "/".join(dict.fromkeys(m["choice_list"]))
        rows.append(m)
    rates = []
    for r in rows:
        if r.get("label") in FIXED + ["auto"] and r["rate"] not in rates:
            rates.append(r["rate"])
    met_all = True
    for rate in rates:
        print(f"\n### P = {rows[0]['ranks']}, {rate}\n")
        print("| size | " + " | ".join(FIXED) + " | auto | auto chose | auto / best fixed | auto / dense | goal |")
        print("|---|" + "---:|" * (len(FIXED) + 1) + "---|---:|---:|---|")
        sizes = sorted({r["size_bytes"] for r in rows if r["rate"] == rate})
        for size in sizes:
            cell = {r["label"]: r for r in rows if r["rate"] == rate and r["size_bytes"] == size}
            t = {k: v["time_s"] for k, v in cell.items() if "time_s" in v}
            def fmt(k):
                if k not in t:
                    return "failed"
                ts = cell[k]["times"]
                spread = f" ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})" if max(ts) > 1.1 * min(ts) else ""
                return f"{t[k] * 1e3:.1f}{spread}"
            fixed = [t[k] for k in FIXED if k in t]
            if "auto" not in t or not fixed or "dense" not in t:
                print(f"| {size_text(size)} | " + " | ".join(fmt(k) for k in FIXED) + " | failed | | | | not measured |")
                met_all = False
                continue
            best, dense, a = min(fixed), t["dense"], t["auto"]
            choice = cell["auto"].get("choice", "")
            if rate == "loopback":
                met = set(choice.split("/")) == {"dense"} or a <= 1.10 * dense
                goal = "met" if met else "NOT met"
                goal += " (dense chosen)" if choice == "dense" else f" ({a / dense:.2f}x dense)"
            else:
                met = a <= 1.10 * best and a <= 1.05 * dense
                goal = "met" if met else "NOT met"
            met_all = met_all and met
            print(f"| {size_text(size)} | " + " | ".join(fmt(k) for k in FIXED) +
                  f" | {fmt('auto')} | {choice} | {a / best:.2f} | {a / dense:.2f} | {goal} |")
    print(f"\nAll goals {'met' if met_all else 'NOT met'} in these tables.")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("loopback")
    lp.add_argument("--build", required=True)
    lp.add_argument("--out", required=True)
    lp.add_argument("--sizes", default="1M,16M,100M")
    lp.add_argument("--ranks", type=int, default=4)
    lp.add_argument("--iters", type=int, default=3)
    lp.add_argument("--warmup", type=int, default=64, help="warm-up calls of every row, auto's included")
    tp = sub.add_parser("table")
    tp.add_argument("files", nargs="+")
    args = ap.parse_args()
    return loopback(args) if args.cmd == "loopback" else table(args)


if __name__ == "__main__":
    sys.exit(main())

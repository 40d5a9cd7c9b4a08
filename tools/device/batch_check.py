#!/usr/bin/env python3
"""Verdicts of the GPU batch (tools/device/gpu_batch.sh) from the files its
runs wrote. Each subcommand prints what it found, ends with one line that
the batch copies into summary.txt, and exits 0 (pass) or 1 (fail).

  sweeps A B          nccl_driver sweep digests of runs A and B: bit-identical
  exact DIR           nccl_driver exact phase: every output equal to the exact sum
  stats DIR           GRADCOMP_STATS files DIR/stats.rank<R>.json against the
                      driver's DIR/driver.rank<R>.json: every NCCL allreduce the
                      driver made was compressed, none passed through
  train LOG           train_fmnist.py RESULT lines: all ranks, equal parameters,
                      --min-accuracy; with --stats DIR every rank compressed at
                      least one allreduce per training step (and gradcomp's
                      stats lines from LOG are repeated)
  times ROOT          table of the ROOT/<run>/time.jsonl rows (--runs globs)
                      beside the --baseline row of the same size
Only the standard library: it runs wherever the batch does.
"""
import argparse
import glob
import json
import os
import re
import sys


def rank_files(folder, pattern):
    """{rank: path} for folder/pattern with <R> standing for the rank."""
    regex = re.compile(re.escape(pattern).replace(re.escape("<R>"), r"(\d+)") + "$")
    out = {}
    for path in glob.glob(os.path.join(folder, pattern.replace("<R>", "*"))):
        m = regex.search(os.path.basename(path))
        if m:
            out[int(m.group(1))] = path
    return out


def read_lines(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def verdict(ok, text):
    print(("PASS " if ok else "FAIL ") + text)
    return 0 if ok else 1


def cmd_sweeps(a):
    ra, rb = rank_files(a.a, "sweep.rank<R>.txt"), rank_files(a.b, "sweep.rank<R>.txt")
    if not ra or sorted(ra) != sorted(rb):
        return verdict(False, "ranks with sweep files differ: %s vs %s" % (sorted(ra), sorted(rb)))
    differing, cases = [], 0
    for r in sorted(ra):
        la, lb = read_lines(ra[r]), read_lines(rb[r])
        cases = len(la)
        if len(la) != len(lb):
            differing.append("rank %d: %d vs %d cases" % (r, len(la), len(lb)))
        differing += ["rank %d: %s | %s" % (r, x, y) for x, y in zip(la, lb) if x != y]
    for line in differing[:20]:
        print("differs: " + line)
    return verdict(not differing and cases > 0,
                   "%d cases x %d ranks, %d outputs differ" % (cases, len(ra), len(differing)))


def cmd_exact(a):
    files = rank_files(a.dir, "exact.rank<R>.txt")
    lines = [(r, line) for r in sorted(files) for line in read_lines(files[r])]
    wrong = [(r, line) for r, line in lines if not line.endswith(" exact")]
    for r, line in wrong[:20]:
        print("rank %d: %s" % (r, line))
    ok = bool(lines) and not wrong and len(files) == a.ranks
    return verdict(ok, "%d ranks, %d outputs, %d not exact" % (len(files), len(lines), len(wrong)))


def load_json(path):
    with open(path) as f:
        return json.load(f)


def compressed_calls(stats):
    comms = stats.get("communicators", [])
    return (sum(c.get("calls_compressed", 0) for c in comms), sum(c.get("calls_passed", 0) for c in comms),
            [c.get("disabled_reason", "") for c in comms if c.get("disabled_reason")])


def cmd_stats(a):
    stats, driver = rank_files(a.dir, "stats.rank<R>.json"), rank_files(a.dir, "driver.rank<R>.json")
    if not driver or sorted(stats) != sorted(driver):
        return verdict(False, "stats files for ranks %s, driver files for ranks %s" % (sorted(stats), sorted(driver)))
    bad = 0
    for r in sorted(driver):
        made = load_json(driver[r])["nccl_allreduce_calls"]
        done, passed, why = compressed_calls(load_json(stats[r]))
        ok = done == made and passed == 0
        bad += not ok
        print("rank %d: %d NCCL allreduce calls made, %d compressed, %d passed through%s" % (
            r, made, done, passed, "; disabled: " + "; ".join(why) if why else ""))
    return verdict(bad == 0, "%d ranks: every allreduce compressed" % len(driver) if bad == 0
                   else "%d of %d ranks did not compress every allreduce" % (bad, len(driver)))


def cmd_train(a):
    results = {}
    with open(a.log, errors="replace") as f:
        for line in f:
            at = line.find("RESULT {")
            if at >= 0:
                r = json.loads(line[at + len("RESULT "):])
                results[r["rank"]] = r
            elif "GRADCOMP INFO stats comm" in line:  # the per-communicator lines at destroy
                print(line.rstrip())
    if len(results) != a.ranks:
        return verdict(False, "RESULT lines from ranks %s, expected %d ranks" % (sorted(results), a.ranks))
    r0 = results[0]
    digests = {r["params_sha256"] for r in results.values()}
    problems = []
    if len(digests) != 1:
        problems.append("parameters differ across ranks")
    if r0["accuracy"] < a.min_accuracy:
        problems.append("accuracy %.4f < %.2f" % (r0["accuracy"], a.min_accuracy))
    detail = "accuracy %.4f after %d steps (%d epochs), %.2f ms/step" % (
        r0["accuracy"], r0["steps"], r0["epochs"], r0["step_ms"])
    if a.stats:
        files = rank_files(a.stats, "stats.rank<R>.json")
        counts = [compressed_calls(load_json(files[r])) if r in files else None for r in range(a.ranks)]
        if any(c is None or c[0] < r0["steps"] for c in counts):
            problems.append("a rank compressed fewer allreduces than steps (or wrote no stats): %s" % counts)
        else:
            detail += "; compressed allreduces per rank %s, passed through %s" % (
                [c[0] for c in counts], [c[1] for c in counts])
    for p in problems:
        print("problem: " + p)
    return verdict(not problems, detail)


def cmd_times(a):
    rows = []
    paths = sorted({p for g in a.runs.split(",") for p in glob.glob(os.path.join(a.root, g, "time.jsonl"))})
    for path in paths:
        rows += [json.loads(line) for line in read_lines(path)]
    base = {r["bytes"]: r["us_per_call"] for r in rows if r["label"] == a.baseline}
    print("%-16s %12s %14s %12s %14s" % ("run", "bytes", "us_per_call", "busbw_GBps", "x_" + a.baseline))
    for r in rows:
        ref = base.get(r["bytes"])
        print("%-16s %12d %14.1f %12.3f %14s" % (r["label"], r["bytes"], r["us_per_call"], r["busbw_GBps"],
                                                "%.2f" % (r["us_per_call"] / ref) if ref else "-"))
    return verdict(bool(rows), "%d timed runs, baseline %s %s" % (len(rows), a.baseline,
                                                                  "found" if base else "missing"))


def cmd_collnet(a):
    """NCCL called the CollNet plugin: every head rank's group completed chunks."""
    files = sorted(glob.glob(os.path.join(a.dir, "stats.collnet.*.json")))
    if not files:
        return verdict(False, "no stats.collnet.*.json in %s: NCCL never created a CollNet group "
                       "(see the step's NCCL_DEBUG=INFO log for why)" % a.dir)
    calls = 0
    for f in files:
        for g in load_json(f).get("collnet", []):
            calls += g.get("calls", 0)
            print("%s: group %s rank %s/%s algo %s: %s chunks, ratio %s, failed %s" % (
                os.path.basename(f), g.get("group"), g.get("rank"), g.get("nranks"), g.get("algo"),
                g.get("calls"), g.get("ratio"), g.get("failed")))
    return verdict(calls > 0, "%d CollNet chunks reduced by gradcomp over %d files" % (calls, len(files)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweeps")
    s.add_argument("a")
    s.add_argument("b")
    s = sub.add_parser("exact")
    s.add_argument("dir")
    s.add_argument("--ranks", type=int, default=4)
    s = sub.add_parser("stats")
    s.add_argument("dir")
    s = sub.add_parser("train")
    s.add_argument("log")
    s.add_argument("--ranks", type=int, default=4)
    s.add_argument("--min-accuracy", type=float, default=0.5)
    s.add_argument("--stats", help="folder of the run's GRADCOMP_STATS files")
    s = sub.add_parser("collnet")
    s.add_argument("dir")
    s = sub.add_parser("times")
    s.add_argument("root")
    s.add_argument("--baseline", default="nccl-dense")
    s.add_argument("--runs", default="*", help="comma list of run folder globs under ROOT")
    a = p.parse_args()
    return globals()["cmd_" + a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

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
  fsdp LOG            train_fmnist_fsdp.py (FSDP2) RESULT lines: all ranks, equal
                      parameters, --min-accuracy; the GRADCOMP_STATS files of
                      --stats DIR prove the reduce-scatters were compressed:
                      every rank's reduce_scatter.calls_compressed > 0 (summed
                      over its communicators); the pass-through reasons are
                      listed. With --dense LOG2 (the dense run of the same
                      steps): accuracy >= LOG2's - --band. With --allgather
                      (GRADCOMP_AG_ALGO set) the parameter allgathers too:
                      every rank's allgather.calls_compressed > 0, and where
                      wire bytes were counted (a synchronous executor; the
                      CUDA executor's proxy owns the transport and counts
                      none) under half their logical bytes (a dense ring
                      sends (P-1)/P of them, blockq int8 about a quarter)
  times ROOT          table of the ROOT/<run>/time.jsonl rows (--runs globs)
                      beside the --baseline row of the same size
  interleave DIR...   nccl_driver interleave phase (DIR/interleave.jsonl): every
                      row has >= 10 timed calls per communicator, both medians
                      > 0 and the ratio is theirs; with the run's
                      GRADCOMP_STATS files, --expect compressed: the flagged
                      communicator (index 0) compressed every call the driver
                      made on it and the plain one none; --expect passed: no
                      communicator compressed anything. Prints the table
                      (ms per call, ratio) of all DIRs.
  jax DIR             tools/device/jax_psum.py results (DIR/jax.rank<R>.json): every
                      rank wrote one, all hold the same last result (SHA-256),
                      and --expect exact: every output exact; close: max
                      relative L2 error <= --rtol. With --stats DIR the
                      GRADCOMP_STATS files are summarized, and --min-compressed
                      N requires N compressed allreduces on every rank.
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
        rank_stats = load_json(stats[r])
        done, passed, why = compressed_calls(rank_stats)
        ok = done == made and passed == 0
        bad += not ok
        # The self-test before the first compressed call (GRADCOMP_SELFTEST):
        # its verdict is what a first GPU run most needs to show.
        tests = ["%s in %.2f s" % (t.get("verdict", "?"), t.get("seconds", 0))
                 for t in (c.get("selftest") for c in rank_stats.get("communicators", [])) if t]
        print("rank %d: %d NCCL allreduce calls made, %d compressed, %d passed through%s%s" % (
            r, made, done, passed, "; disabled: " + "; ".join(why) if why else "",
            "; self-test: " + ", ".join(tests) if tests else ""))
    return verdict(bad == 0, "%d ranks: every allreduce compressed" % len(driver) if bad == 0
                   else "%d of %d ranks did not compress every allreduce" % (bad, len(driver)))


def read_results(log, echo_stats=True):
    """{rank: RESULT object} of a training log (train_fmnist*.py); with echo_stats
    gradcomp's per-communicator stats lines in it are printed."""
    results = {}
    with open(log, errors="replace") as f:
        for line in f:
            at = line.find("RESULT {")
            if at >= 0:
                r = json.loads(line[at + len("RESULT "):])
                results[r["rank"]] = r
            elif echo_stats and "GRADCOMP INFO stats comm" in line:  # printed at destroy
                print(line.rstrip())
    return results


def cmd_train(a):
    results = read_results(a.log)
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


def reduce_scatter_stats(path, key="reduce_scatter"):
    """One rank's stats file: reduce-scatter calls (compressed, passed), logical
    and wire bytes, summed over its communicators, and the pass-through
    reasons of all its calls (the stats count them per communicator, not per
    collective). None for a counter when no communicator has the
    "reduce_scatter" object (a libgradcomp older than its interception).
    key="allgather": the same for allgathers."""
    comms = load_json(path).get("communicators", [])
    rs = [c[key] for c in comms if isinstance(c.get(key), dict)]
    total = {k: sum(r.get(k, 0) for r in rs) if rs else None
             for k in ("calls_compressed", "calls_passed", "logical_bytes", "wire_bytes")}
    reasons = {}
    for c in comms:
        for k, v in c.get("pass_reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    total["pass_reasons"] = reasons
    total["disabled"] = [c["disabled_reason"] for c in comms if c.get("disabled_reason")]
    return total


def cmd_fsdp(a):
    results = read_results(a.log)
    problems = []
    if len(results) != a.ranks:
        return verdict(False, "RESULT lines from ranks %s, expected %d ranks" % (
            sorted(results), a.ranks))
    r0 = results[0]
    if any(r.get("sharding") != "fully_shard" for r in results.values()):
        problems.append("not train_fmnist_fsdp.py's RESULT lines "
                        "(no \"sharding\": \"fully_shard\")")
    if len({r["params_sha256"] for r in results.values()}) != 1:
        problems.append("parameters differ across ranks")
    if r0["accuracy"] < a.min_accuracy:
        problems.append("accuracy %.4f < %.2f" % (r0["accuracy"], a.min_accuracy))
    detail = "FSDP2 %s %s: accuracy %.4f after %d steps, %.2f ms/step" % (
        r0.get("reduce_op"), r0.get("reduce_dtype"), r0["accuracy"], r0["steps"], r0["step_ms"])
    if a.dense:
        dense = read_results(a.dense, echo_stats=False)
        if 0 not in dense:
            problems.append("no rank 0 RESULT line in the dense run %s" % a.dense)
        else:
            d = dense[0]
            detail += " (dense %.4f after %d steps, %+.4f, band %.2f)" % (
                d["accuracy"], d["steps"], r0["accuracy"] - d["accuracy"], a.band)
            if d["steps"] != r0["steps"]:
                problems.append("the dense run made %d steps, this one %d" % (
                    d["steps"], r0["steps"]))
            if r0["accuracy"] < d["accuracy"] - a.band:
                problems.append("accuracy %.4f is below dense %.4f - %.2f" % (
                    r0["accuracy"], d["accuracy"], a.band))
    if a.stats:
        files = rank_files(a.stats, "stats.rank<R>.json")
        compressed, passed, reasons = [], [], {}
        for r in range(a.ranks):
            if r not in files:
                problems.append("rank %d wrote no stats file in %s" % (r, a.stats))
                compressed.append(None)
                continue
            t = reduce_scatter_stats(files[r])
            compressed.append(t["calls_compressed"])
            passed.append(t["calls_passed"])
            for k, v in t["pass_reasons"].items():
                reasons[k] = reasons.get(k, 0) + v
            print("rank %d: reduce-scatter %s compressed (%s -> %s bytes), %s passed through; "
                  "pass reasons %s%s" % (r, t["calls_compressed"], t["logical_bytes"],
                                         t["wire_bytes"], t["calls_passed"], t["pass_reasons"],
                                         "; disabled: " + "; ".join(t["disabled"])
                                         if t["disabled"] else ""))
            if t["calls_compressed"] is None:
                problems.append("rank %d: no \"reduce_scatter\" in its stats (a libgradcomp "
                                "without reduce-scatter interception?)" % r)
            elif t["calls_compressed"] <= 0:
                problems.append("rank %d compressed no reduce-scatter (pass reasons %s)" % (
                    r, t["pass_reasons"] or "none recorded"))
        detail += "; compressed reduce-scatters per rank %s, passed %s, " \
                  "pass reasons (all ranks) %s" % (compressed, passed, reasons)
        if a.allgather:
            gathered, ratios = [], []
            for r in sorted(files):
                g = reduce_scatter_stats(files[r], "allgather")
                gathered.append(g["calls_compressed"])
                ratio = (g["logical_bytes"] / g["wire_bytes"]
                         if g["logical_bytes"] and g["wire_bytes"] else None)
                ratios.append(None if ratio is None else round(ratio, 2))
                print("rank %d: allgather %s compressed (%s -> %s bytes), %s passed through" % (
                    r, g["calls_compressed"], g["logical_bytes"], g["wire_bytes"],
                    g["calls_passed"]))
                if g["calls_compressed"] is None:
                    problems.append("rank %d: no \"allgather\" in its stats (a libgradcomp "
                                    "without allgather interception?)" % r)
                elif g["calls_compressed"] <= 0:
                    problems.append("rank %d compressed no allgather (pass reasons %s)" % (
                        r, g["pass_reasons"] or "none recorded"))
                elif g["wire_bytes"] and ratio < 2:
                    problems.append("rank %d: allgather wire bytes %s are not under half of "
                                    "their logical bytes %s (not compressed)" % (
                                        r, g["wire_bytes"], g["logical_bytes"]))
            detail += "; compressed allgathers per rank %s, logical/wire %s" % (gathered, ratios)
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


def interleave_rows(folder):
    path = os.path.join(folder, "interleave.jsonl")
    return [json.loads(line) for line in read_lines(path)] if os.path.exists(path) else []


def cmd_interleave(a):
    problems, rows = [], []
    for folder in a.dirs:
        found = interleave_rows(folder)
        if not found:
            problems.append("%s: no interleave.jsonl rows" % folder)
        for r in found:
            rows.append(r)
            name = "%s %d bytes" % (r.get("label"), r.get("bytes", 0))
            f, p = r.get("flagged_median_ms", 0), r.get("plain_median_ms", 0)
            if r.get("calls", 0) < 10 or len(r.get("flagged_ms", [])) != r.get("calls") or \
                    len(r.get("plain_ms", [])) != r.get("calls"):
                problems.append("%s: %s timed calls per communicator (want >= 10, all listed)" %
                                (name, r.get("calls")))
            if not (f > 0 and p > 0):
                problems.append("%s: medians %s and %s ms (want both > 0)" % (name, f, p))
            elif r.get("ratio") is None or abs(r["ratio"] - f / p) > 1e-3 * max(1.0, f / p):
                problems.append("%s: ratio %s is not %.4f / %.4f" % (name, r.get("ratio"), f, p))
        if a.expect:
            problems += interleave_stats(folder, a.expect)
    print("%-22s %10s %12s %12s %8s %6s  %s" % ("run", "bytes", "flagged_ms", "plain_ms", "ratio",
                                               "calls", "plain"))
    for r in rows:
        print("%-22s %10d %12.3f %12.3f %8s %6d  %s" % (
            r["label"], r["bytes"], r["flagged_median_ms"], r["plain_median_ms"],
            "%.3f" % r["ratio"] if r.get("ratio") is not None else "-", r["calls"], r["plain_via"]))
    for p in problems:
        print("problem: " + p)
    return verdict(bool(rows) and not problems,
                   "%d side-by-side rows (medians of >= 10 calls each)%s" % (
                       len(rows), "" if not problems else ", %d problems" % len(problems)))


def interleave_stats(folder, expect):
    """The flagged communicator is index 0 in each rank's stats; the plain
    one, when it went through the interposer, index 1."""
    stats = rank_files(folder, "stats.rank<R>.json")
    driver = rank_files(folder, "driver.rank<R>.json")
    if not driver or sorted(stats) != sorted(driver):
        return ["%s: stats files for ranks %s, driver files for ranks %s" % (
            folder, sorted(stats), sorted(driver))]
    problems = []
    for r in sorted(driver):
        d = load_json(driver[r])
        made, calls = d["nccl_allreduce_calls"], d.get("interleave_calls", {})
        comms = {c.get("index"): c for c in load_json(stats[r]).get("communicators", [])}
        flagged, plain = comms.get(0, {}), comms.get(1)
        fc, pc = flagged.get("calls_compressed", 0), (plain or {}).get("calls_compressed", 0)
        print("rank %d: flagged %d calls, %d compressed, %d passed; plain %d calls, %s" % (
            r, calls.get("flagged", 0) + made, fc, flagged.get("calls_passed", 0),
            calls.get("plain", 0), "not seen by the interposer" if plain is None else
            "%d compressed, %d passed" % (pc, plain.get("calls_passed", 0))))
        if expect == "compressed" and fc != calls.get("flagged", 0) + made:
            problems.append("rank %d: the flagged communicator compressed %d of %d calls" % (
                r, fc, calls.get("flagged", 0) + made))
        if pc != 0 or (expect == "passed" and fc != 0):
            problems.append("rank %d: compressed calls where none were expected "
                            "(flagged %d, plain %d)" % (r, fc, pc))
    return problems


def cmd_jax(a):
    files = rank_files(a.dir, "jax.rank<R>.json")
    rows = [load_json(files[r]) for r in sorted(files)]
    problems = []
    if len(rows) != a.ranks:
        problems.append("results from ranks %s, expected %d ranks" % (sorted(files), a.ranks))
    if len({r["last_sha256"] for r in rows}) > 1:
        problems.append("ranks hold different results (last call's SHA-256 differs)")
    for r in rows:
        print("rank %d: %s, jax %s, %d calls of %d floats (%s inputs), exact %s, "
              "max rel L2 error %.3g, median %s ms, libnccl %s" % (
                  r["rank"], r["device"], r["jax"], r["calls"], r["elements"], r["inputs"],
                  r["exact"], r["max_rel_l2_err"], r["median_ms"], r["libnccl"]))
        if a.expect == "exact" and not r["exact"]:
            problems.append("rank %d: not exact (max abs error %g)" % (r["rank"], r["max_abs_err"]))
        if a.expect == "close" and not r["max_rel_l2_err"] <= a.rtol:
            problems.append("rank %d: relative L2 error %g > %g" % (
                r["rank"], r["max_rel_l2_err"], a.rtol))
    detail = ""
    if a.stats:
        stats = rank_files(a.stats, "stats.rank<R>.json")
        counts = {}
        for rank, path in sorted(stats.items()):
            comms = load_json(path).get("communicators", [])
            done, passed, _ = compressed_calls(load_json(path))
            reasons = {}
            for c in comms:
                for k, v in c.get("pass_reasons", {}).items():
                    reasons[k] = reasons.get(k, 0) + v
            counts[rank] = done
            print("rank %d: %d allreduces compressed, %d passed through %s" % (
                rank, done, passed, reasons))
        if a.min_compressed and (len(counts) != a.ranks or
                                 any(c < a.min_compressed for c in counts.values())):
            problems.append("compressed allreduces per rank %s, want >= %d on each of %d ranks" % (
                counts, a.min_compressed, a.ranks))
        detail = "; compressed per rank %s" % [counts.get(r) for r in range(a.ranks)]
    for p in problems:
        print("problem: " + p)
    median = rows[0]["median_ms"] if rows else None
    return verdict(not problems, "%d ranks, psum %s (max rel L2 error %.3g), median %s ms%s" % (
        len(rows), a.expect, max([r["max_rel_l2_err"] for r in rows] or [0]), median, detail))


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
    s = sub.add_parser("fsdp")
    s.add_argument("log")
    s.add_argument("--ranks", type=int, default=4)
    s.add_argument("--min-accuracy", type=float, default=0.5)
    s.add_argument("--stats", help="folder of the run's GRADCOMP_STATS files")
    s.add_argument("--dense", help="log of the dense run to compare the accuracy with")
    s.add_argument("--band", type=float, default=0.05,
                   help="accuracy may be this much below the dense run's")
    s.add_argument("--allgather", action="store_true",
                   help="the allgathers must be compressed too (GRADCOMP_AG_ALGO)")
    s = sub.add_parser("collnet")
    s.add_argument("dir")
    s = sub.add_parser("interleave")
    s.add_argument("dirs", nargs="+")
    s.add_argument("--expect", choices=["compressed", "passed"],
                   help="check the GRADCOMP_STATS files beside interleave.jsonl")
    s = sub.add_parser("jax")
    s.add_argument("dir")
    s.add_argument("--ranks", type=int, default=4)
    s.add_argument("--expect", choices=["exact", "close"], default="exact")
    s.add_argument("--rtol", type=float, default=0.1)
    s.add_argument("--stats", help="folder of the run's GRADCOMP_STATS files")
    s.add_argument("--min-compressed", type=int, default=0)
    s = sub.add_parser("times")
    s.add_argument("root")
    s.add_argument("--baseline", default="nccl-dense")
    s.add_argument("--runs", default="*", help="comma list of run folder globs under ROOT")
    a = p.parse_args()
    return globals()["cmd_" + a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

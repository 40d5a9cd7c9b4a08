#!/usr/bin/env python3
"""Launcher tests (tests/launch.cmake registers them):

  launch_check.py cli BIN APP          gradcomp-launch around a 2-rank NCCL application
  launch_check.py launchers BIN [APP]  gradcomp-bench/-train as ranks of other launchers

BIN holds gradcomp-launch, gradcomp-run, gradcomp-bench, gradcomp-train (the
build's tools, or an installed bin/); APP is tests/nccl_double/nccl_double_app,
which calls ncclAllReduce through the NCCL test double (see nccl_app.cc for
the calls it makes). `launchers` runs the real mpirun when APP is given and
mpirun is on PATH, and the variables of Slurm and torchrun set by hand.
"""
import glob
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile

# Per rank, what nccl_app.cc does: (calls, logical bytes) by outcome.
MiB = 1 << 20
COMPRESSED = (5, 3 * 4 * MiB + 2 * 16 * MiB)
PASSED = (7, 4 * 1024 + 2 * 4 * MiB + 4 * MiB)
REASONS = {"below GRADCOMP_MIN_BYTES": 4, "data type not f32/f16/bf16": 2, "inside ncclGroupStart/End": 1}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)
    return cond


def run_cmd(cmd, env=None, timeout=120):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def human(n):  # the table's byte format
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def parse_summary(text):
    """The numbers of gradcomp-launch's table, as printed."""
    out = {"reasons": {}, "disabled": {}}
    section = None
    for line in text.splitlines():
        m = re.match(r"== gradcomp summary: algorithm (\S+), (\d+) rank file\(s\), (\d+) communicator", line)
        if m:
            out["algo"], out["ranks"], out["comms"] = m.group(1), int(m.group(2)), int(m.group(3))
        m = re.match(r"compressed\s+(\d+)\s+(.+?) -> (.+?) sent \((.+)\)$", line)
        if m:
            out["compressed"] = (int(m.group(1)), m.group(2), m.group(3), m.group(4))
        m = re.match(r"passed through to NCCL\s+(\d+)\s+(.+)$", line)
        if m:
            out["passed"] = (int(m.group(1)), m.group(2))
        m = re.match(r"time in gradcomp\s+([\d.]+) s max per rank", line)
        if m:
            out["seconds_max"] = float(m.group(1))
        if line.startswith("why calls passed through"):
            section = "reasons"
        elif line.startswith("what disabled compression"):
            section = "disabled"
        elif not line.startswith("  "):
            section = None
        elif section == "reasons":
            m = re.match(r"  (.+?)\s+(\d+)$", line)
            out["reasons"][m.group(1)] = int(m.group(2))
        elif section == "disabled":
            m = re.match(r"  (.+?)\s+(\d+)  (.*)$", line)
            out["disabled"][m.group(1)] = (int(m.group(2)), m.group(3))
    return out


def stats_files(stats_dir):
    docs = []
    for path in sorted(glob.glob(os.path.join(stats_dir, "run-*.rank*.json"))):
        with open(path) as f:
            docs.append(json.load(f))
    return docs


def table_matches_files(table, docs, where):
    """Every number of the table equals the sums over the stats files."""
    comms = [c for d in docs for c in d["communicators"]]
    total = lambda key: sum(c[key] for c in comms)
    check(table.get("ranks") == len(docs), f"{where}: rank files {table.get('ranks')} != {len(docs)}")
    logical, wire = total("logical_bytes"), total("wire_bytes")
    ratio = f"ratio {logical / wire:.2f}x" if wire else "ratio n/a (no wire bytes counted)"
    check(table.get("compressed") == (total("calls_compressed"), human(logical), human(wire), ratio),
          f"{where}: compressed row {table.get('compressed')} != files "
          f"{(total('calls_compressed'), human(logical), human(wire), ratio)}")
    check(table.get("passed") == (total("calls_passed"), human(total("passed_bytes"))),
          f"{where}: passed row {table.get('passed')} != files")
    per_rank = [sum(c["compressed_seconds"] + c["wiring_seconds"] for c in d["communicators"]) for d in docs]
    check(abs(table.get("seconds_max", -1) - max(per_rank)) <= 0.0005,
          f"{where}: time {table.get('seconds_max')} != files {max(per_rank):.4f}")
    reasons = {}
    for c in comms:
        for reason, n in c["pass_reasons"].items():
            if reason == "compression disabled on this communicator":
                reason += f" ({c['disabled_kind']})"
            reasons[reason] = reasons.get(reason, 0) + n
    check(table["reasons"] == reasons, f"{where}: reasons {table['reasons']} != files {reasons}")


def cli(bin_dir, app):
    launch = os.path.join(bin_dir, "gradcomp-launch")
    grun = os.path.join(bin_dir, "gradcomp-run")
    tmp = tempfile.mkdtemp(prefix="gc_launch_")
    base = dict(os.environ, NCCL_DOUBLE_TIMEOUT_S="30", GRADCOMP_TIMEOUT_S="30", GRADCOMP_CONFIG="")
    for name in ("GRADCOMP_ALGO", "GRADCOMP_MIN_BYTES", "GRADCOMP_STATS", "LD_PRELOAD"):
        base.pop(name, None)

    def run(cmd):  # each job its own exchange directory for the NCCL double
        return run_cmd(cmd, dict(base, NCCL_DOUBLE_DIR=tempfile.mkdtemp(dir=tmp)))

    # 1. A clean run: the table equals the files, the files equal what the app did.
    stats = os.path.join(tmp, "stats")
    plot, summary = os.path.join(tmp, "p.png"), os.path.join(tmp, "s.json")
    rc, out, err = run([launch, "--algo", "dense", "--min-bytes", "1M", "--stats-dir", stats,
                        "--plot", plot, "--summary-json", summary, "--", grun, "-n", "2", app])
    check(rc == 0, f"clean run: exit {rc}\n{out}{err}")
    check(out.count("12 allreduces checked") == 2, "clean run: both ranks checked their sums")
    docs = stats_files(stats)
    check(len(docs) == 2, f"clean run: {len(docs)} stats files")
    for d in docs:
        c = d["communicators"][0]
        check((c["calls_compressed"], c["logical_bytes"]) == COMPRESSED, f"rank {d['rank']}: compressed {c}")
        check((c["calls_passed"], c["passed_bytes"]) == PASSED, f"rank {d['rank']}: passed {c}")
        check(c["pass_reasons"] == REASONS, f"rank {d['rank']}: reasons {c['pass_reasons']}")
        check(c["wire_bytes"] == c["logical_bytes"], "dense ring on 2 ranks sends the logical bytes once")
    table = parse_summary(err)
    table_matches_files(table, docs, "clean run")
    check(table.get("algo") == "dense" and table.get("comms") == 1, f"clean run: header {table}")
    check(table["reasons"] == {k: 2 * v for k, v in REASONS.items()}, f"clean run: reasons {table['reasons']}")
    with open(summary) as f:
        js = json.load(f)
    check((js["calls_compressed"], js["calls_passed"], js["exit_code"]) == (10, 14, 0), f"summary json {js}")
    with open(plot, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "--plot wrote a PNG")

    # 2. A configuration mismatch is counted and named.
    rc, out, err = run([launch, "--algo", "dense", "--stats-dir", os.path.join(tmp, "mismatch"), "--",
                        grun, "-n", "2", app, "--mismatch"])
    check(rc == 0, f"mismatch run: exit {rc}\n{err}")
    table = parse_summary(err)
    table_matches_files(table, stats_files(os.path.join(tmp, "mismatch")), "mismatch run")
    kind = table["disabled"].get("config mismatch")
    check(kind is not None and kind[0] == 2 and "GRADCOMP_MIN_BYTES" in kind[1],
          f"mismatch run: disabled rows {table['disabled']}")
    check(table["reasons"].get("compression disabled on this communicator (config mismatch)") == 10,
          f"mismatch run: reasons {table['reasons']}")

    # 3. The command's exit status is the launcher's, with the summary still printed.
    rc, _, err = run([launch, "--algo", "dense", "--stats-dir", os.path.join(tmp, "fail"), "--",
                      grun, "-n", "2", app, "--exit-code", "7"])
    check(rc == 7, f"failing command: launcher exit {rc}, expected 7\n{err}")
    check("the command exited with status 7" in err and "== gradcomp summary" in err,
          f"failing command: message and summary\n{err}")
    rc, _, err = run([launch, "--algo", "dense", "--stats-dir", os.path.join(tmp, "sig"), "--",
                      "sh", "-c", "kill -TERM $$"])
    check(rc == 128 + 15, f"killed command: exit {rc}, expected 143")
    check("no stats files" in err, f"killed command without NCCL: says there are no stats\n{err}")
    rc, _, err = run([launch, "--algo", "dense", "--", os.path.join(tmp, "no-such-program")])
    check(rc == 127 and "cannot run" in err, f"missing program: exit {rc}\n{err}")

    # 4. Reduce-scatters (sharded training) are counted apart, as the files say.
    rs_dir = os.path.join(tmp, "rs")
    rc, out, err = run([launch, "--algo", "dense", "--stats-dir", rs_dir, "--",
                        grun, "-n", "2", app, "--reduce-scatter"])
    check(rc == 0, f"reduce-scatter run: exit {rc}\n{out}{err}")
    docs = stats_files(rs_dir)
    rs = [d["communicators"][0]["reduce_scatter"] for d in docs]
    check(len(rs) == 2 and all((r["calls_compressed"], r["calls_passed"]) == (2, 1) for r in rs) and
          all(r["logical_bytes"] == 2 * 4 * MiB and r["passed_bytes"] == 4 * MiB for r in rs),
          f"reduce-scatter run: files {rs}")
    line = [l for l in err.splitlines() if l.startswith("  of these, reduce-scatter")]
    wire = sum(r["wire_bytes"] for r in rs)
    want = (f"  of these, reduce-scatter{'':8}{4:>10}  {human(4 * 4 * MiB)} -> {human(wire)} sent "
            f"(ratio {4 * 4 * MiB / wire:.2f}x); 2 passed ({human(2 * 4 * MiB)})")
    check(line == [want], f"reduce-scatter run: summary line {line}, want [{want!r}]")
    table_matches_files(parse_summary(err), docs, "reduce-scatter run")

    # 4a. Allgathers (GRADCOMP_AG_ALGO) too: blockq's int8 codes and a scale per
    # 2048 elements, one payload per call to the one peer (allgather.h).
    ag_dir = os.path.join(tmp, "ag")
    rc, out, err = run([launch, "--algo", "dense", "--ag-algo", "blockq", "--stats-dir", ag_dir,
                        "--", grun, "-n", "2", app, "--allgather"])
    check(rc == 0, f"allgather run: exit {rc}\n{out}{err}")
    docs = stats_files(ag_dir)
    ag = [d["communicators"][0]["allgather"] for d in docs]
    shard = 512 * 1024  # elements each rank sends: 4 MiB of output over 2 ranks
    check(len(ag) == 2 and all((a["calls_compressed"], a["calls_passed"]) == (2, 1) for a in ag) and
          all(a["logical_bytes"] == 2 * 4 * MiB and a["passed_bytes"] == 4 * MiB and
              a["wire_bytes"] == 2 * (shard + 4 * shard // 2048) for a in ag),
          f"allgather run: files {ag}")
    line = [l for l in err.splitlines() if l.startswith("  of these, allgather")]
    wire = sum(a["wire_bytes"] for a in ag)
    want = (f"{'  of these, allgather':34}{4:>10}  {human(4 * 4 * MiB)} -> {human(wire)} sent "
            f"(ratio {4 * 4 * MiB / wire:.2f}x); 2 passed ({human(2 * 4 * MiB)})")
    check(line == [want], f"allgather run: summary line {line}, want [{want!r}]")
    table_matches_files(parse_summary(err), docs, "allgather run")

    # 4b. Shadow mode: every call returns NCCL's result (the app's exact checks
    # pass), and what qsgd would have done is summarized.
    sh_dir = os.path.join(tmp, "shadow")
    rc, out, err = run([launch, "--algo", "qsgd", "--shadow", "--stats-dir", sh_dir, "--",
                        grun, "-n", "2", app])
    check(rc == 0, f"shadow run: exit {rc}\n{out}{err}")
    check(out.count("12 allreduces checked") == 2, "shadow run: both ranks checked NCCL's sums")
    docs = stats_files(sh_dir)
    for d in docs:
        c = d["communicators"][0]
        sh = c["shadow"]
        check(c["calls_compressed"] == 0 and c["pass_reasons"].get("shadow") == COMPRESSED[0],
              f"shadow run rank {d['rank']}: {c['calls_compressed']} compressed, {c['pass_reasons']}")
        check(sh["calls"] == COMPRESSED[0] and sh["failed"] == 0 and
              sh["agreed"] == sh["agree_checked"] == COMPRESSED[0] and
              0 < sh["wire_bytes"] < sh["dense_wire_bytes"] and 0 <= sh["rel_error_max"] < 1,
              f"shadow run rank {d['rank']}: {sh}")
    calls = 2 * COMPRESSED[0]
    check("shadow mode (every call returned NCCL's result); compression would have:" in err and
          f"  agreed across ranks on {calls} of {calls} calls" in err,
          f"shadow run: summary\n{err}")

    # 5. Bad flags and settings: a clear error, exit 2, and the command never runs.
    marker = os.path.join(tmp, "ran")
    for flags, message in (
            (["--algo", "nosuch"], "GRADCOMP_ALGO='nosuch': unknown algorithm"),
            (["--algo", "dense", "--density", "abc"], "GRADCOMP_DENSITY='abc'"),
            (["--algo", "dense", "--min-bytes", "lots"], "GRADCOMP_MIN_BYTES='lots'"),
            (["--algo", "dense", "--config", os.path.join(tmp, "none.toml")], "none.toml: cannot open"),
            (["--bogus"], "unknown option '--bogus'"),
            (["--param", "NOPE=1"], "--param NOPE=1"),
            (["--algo"], "--algo: missing its value"),
            (["--library", os.path.join(tmp, "libnone.so")], "does not exist")):
        rc, _, err = run([launch] + flags + ["--", "touch", marker])
        check(rc == 2 and message in err, f"{flags}: exit {rc}, want 2 and '{message}' in\n{err}")
        check(not os.path.exists(marker), f"{flags}: the command ran despite the error")
    rc, _, err = run([launch, "--algo", "dense"])
    check(rc == 2 and "missing the command" in err, f"no command: exit {rc}\n{err}")
    rc, out, err = run([launch, "--param", "gradcomp_density=0.5", "--dry-run", "--", "true"])
    preload = re.search(r"^LD_PRELOAD=(\S+)$", out, re.M)
    prefix = os.path.dirname(os.path.abspath(bin_dir))
    check(rc == 0 and "GRADCOMP_DENSITY=0.5" in out and preload is not None and
          preload.group(1).startswith(prefix + "/") and preload.group(1).endswith("/libgradcomp.so") and
          os.path.isfile(preload.group(1)) and
          "OMPI_MCA_mca_base_env_list=LD_PRELOAD;GRADCOMP_STATS;GRADCOMP_DENSITY" in out,
          f"--dry-run: exit {rc}\n{out}{err}")
    rc, out, _ = run([launch, "--help"])
    check(rc == 0 and "EXIT STATUS" in out and "--density V" in out, "--help is the man-style reference")
    subprocess.run(["rm", "-rf", tmp])


def free_port_pair():
    """A port p such that p and p+1 are free on 127.0.0.1 right now."""
    for _ in range(100):
        p = random.randint(20000, 60000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def two_ranks(cmd, env_of_rank, where):
    procs = [subprocess.Popen(cmd, env=env_of_rank(r), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, p in enumerate(procs):
        check(p.returncode == 0, f"{where}: rank {r} exit {p.returncode}\n{outs[r]}")
    return outs


def launchers(bin_dir, app):
    bench = [os.path.join(bin_dir, "gradcomp-bench"), "--algo", "dense", "-b", "1M", "-e", "1M",
             "-n", "2", "-w", "1"]
    base = {k: v for k, v in os.environ.items()
            if not re.match(r"(GRADCOMP_|OMPI_|PMI|SLURM_|TORCHELASTIC_|MASTER_|RANK$|WORLD_SIZE$|PBS_)", k)}
    base["GRADCOMP_TIMEOUT_S"] = "30"
    ok_line = re.compile(r"# Wrong values\s+: 0 OK")

    # srun's variables by hand: rank/size from Slurm, port from the job and step.
    job = str(random.randint(1, 10**9))
    outs = two_ranks(bench, lambda r: dict(base, SLURM_PROCID=str(r), SLURM_NTASKS="2",
                                           SLURM_STEP_NUM_NODES="1", SLURM_JOB_ID=job, SLURM_STEP_ID="0"),
                     "Slurm variables")
    check(any(ok_line.search(o) for o in outs) and "ranks 2" in outs[0], f"Slurm variables: {outs[0]}")

    # torchrun's variables by hand, with MASTER_PORT held as torchrun's agent holds it.
    port = free_port_pair()
    with socket.socket() as agent_store:
        agent_store.bind(("127.0.0.1", port))
        agent_store.listen()
        outs = two_ranks(bench, lambda r: dict(base, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                               TORCHELASTIC_RUN_ID="t1", TORCHELASTIC_USE_AGENT_STORE="True",
                                               SLURM_PROCID="0", SLURM_NTASKS="1"),
                         "torchrun variables")
    check(any(ok_line.search(o) for o in outs) and "ranks 2" in outs[0], f"torchrun variables: {outs[0]}")

    if app is None:
        return
    mpirun = ["mpirun", "--oversubscribe", "-n", "2"]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    # The real mpirun: no GRADCOMP_RANK/NRANKS/BOOTSTRAP anywhere.
    rc, out, err = run_cmd(mpirun + bench, base)
    check(rc == 0 and ok_line.search(out) and "ranks 2" in out, f"mpirun gradcomp-bench: exit {rc}\n{out}{err}")
    train = [os.path.join(bin_dir, "gradcomp-train"), "--algo", "dense", "--epochs", "1",
             "--train-limit", "512", "--test-limit", "256"]
    rc, out, err = run_cmd(mpirun + train, base)
    check(rc == 0 and "dense, 2 ranks" in out, f"mpirun gradcomp-train: exit {rc}\n{out}{err}")
    # gradcomp-launch around mpirun: the variables reach the ranks, the table matches.
    tmp = tempfile.mkdtemp(prefix="gc_launch_mpi_")
    env = dict(base, NCCL_DOUBLE_DIR=tmp, GRADCOMP_CONFIG="")
    rc, out, err = run_cmd([os.path.join(bin_dir, "gradcomp-launch"), "--algo", "dense",
                        "--stats-dir", os.path.join(tmp, "stats"), "--"] + mpirun + [app], env)
    check(rc == 0 and out.count("12 allreduces checked") == 2, f"launch around mpirun: exit {rc}\n{out}{err}")
    docs = stats_files(os.path.join(tmp, "stats"))
    table_matches_files(parse_summary(err), docs, "launch around mpirun")
    check([d["communicators"][0]["calls_compressed"] for d in docs] == [5, 5], "mpirun: 5 compressed per rank")
    subprocess.run(["rm", "-rf", tmp])


def main():
    mode, bin_dir = sys.argv[1], sys.argv[2]
    app = sys.argv[3] if len(sys.argv) > 3 else None
    if mode == "cli":
        cli(bin_dir, app)
    elif mode == "launchers":
        launchers(bin_dir, app)
    else:
        sys.exit(f"unknown mode {mode}")
    print(f"{mode}: {'FAILED ' + str(len(failures)) if failures else 'all checks passed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

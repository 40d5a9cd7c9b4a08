#!/usr/bin/env bash
# The GPU batch's parts that run without a GPU (tests/device_batch.cmake):
#   device_batch_test.sh dry-run SRC BUILD
#       tools/device/prepare.sh --pack (a CUDA build with a clean tree), then
#       tools/device/gpu_batch.sh --dry-run: prepares the carry, checks it
#       exists, unpacks and configures against it, the pack is current and its
#       binaries start, everything fits 64 MiB, prints the plan
#   device_batch_test.sh stacks SRC BUILD
#       tools/device/run_limited.sh on a process tree that hangs on purpose
#   device_batch_test.sh passthrough SRC BUILD
#   device_batch_test.sh compressed SRC BUILD ALGO...
#       tools/device/nccl_driver.py with NCCL's C API served by the test-double
#       libnccl.so.2 on host memory. passthrough: a sweep without LD_PRELOAD
#       and one with LD_PRELOAD=libgradcomp.so GRADCOMP_ALGO=off are
#       bit-identical and the exact phase is exact. compressed: for each ALGO
#       a recording under the interposer passes gradcomp-refcheck and every
#       call was compressed (the stats files); the first ALGO's recording
#       fails gradcomp-refcheck as dense sums, and with one output element
#       changed (the checker can fail).
#   device_batch_test.sh interleave SRC BUILD
#       the driver's interleave phase against the test double: two
#       communicators in the same 4 rank processes, the first flagged by a
#       GRADCOMP_CONFIG file (oktopk, comms = "index:0"), the second not; calls
#       alternate. batch_check.py interleave: >= 10 timed calls each, both
#       medians > 0, the flagged communicator compressed every call and the
#       plain one none. Then the pass-through overhead: GRADCOMP_ALGO=off on
#       the flagged one against NCCL's own pncclAllReduce (the interposer never
#       sees that communicator): nothing compressed, both medians > 0.
#   device_batch_test.sh jax SRC BUILD
#       tools/device/jax_psum.py, 4 processes on JAX's CPU gloo collectives:
#       integer inputs exact on every rank, normal inputs within float
#       rounding, every rank holding the same result (batch_check.py jax).
#       Skipped (77, with the reason) where jax cannot be imported.
#   device_batch_test.sh example SRC BUILD
#       examples/pytorch/train_fmnist.py, 2 ranks on gloo, 10 steps: both
#       ranks end with the same parameters and learned something
#   device_batch_test.sh fsdp-example SRC BUILD
#       examples/pytorch/train_fmnist_fsdp.py (FSDP2, part g) byte-compiles;
#       where PyTorch lacks FSDP2 (< 2.4: Debian 12's 1.13) it exits 3 with
#       the message naming what is missing, before any process group; where
#       it has FSDP2, 2 ranks on gloo (sum reduce-scatters) for 10 steps pass
#       batch_check.py fsdp without stats
#   device_batch_test.sh fsdp-check SRC BUILD
#       batch_check.py fsdp (part g's verdict) on synthetic RESULT logs and
#       GRADCOMP_STATS files: passes a run whose every rank compressed
#       reduce-scatters within the band of dense, and fails a rank without
#       compressed reduce-scatters, a missing stats file, stats without the
#       reduce_scatter object, accuracy below the band, DDP's RESULT lines;
#       with --allgather (part g's blockq case) passes compressed allgathers
#       (wire bytes counted or not) and fails a rank without any, dense-sized
#       wire bytes and stats without the allgather object
#       (Python's standard library only: never skipped)
# Exit 77 (skipped) only when PyTorch cannot be imported (CI installs
# python3-torch, so there it runs).
set -euo pipefail
mode="$1" src="$2" build="$3"
shift 3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

torch_python() {
  local py
  for py in ${GC_PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import torch.distributed' 2>/dev/null; then
      echo "$py"
      return 0
    fi
  done
  echo "SKIP: no python3 that imports torch (apt-get install python3-torch)" >&2
  exit 77
}

# torch.distributed.run with N ranks. PyTorch 1.13 on Python 3.11 (Debian 12)
# cannot parse its own default --redirects/--tee values: give valid ones there.
torchrun_fix=""
torchrun() {
  local n="$1"
  shift
  if [ -z "$torchrun_fix" ]; then
    torchrun_fix=none
    "$py" -c 'from torch.distributed.elastic.multiprocessing.api import Std as S; exit(S.from_str("0") is None)' ||
      torchrun_fix="--redirects 2 --tee 2"
  fi
  # shellcheck disable=SC2046
  "$py" -m torch.distributed.run --standalone --monitor_interval 1 --nproc_per_node "$n" \
    $([ "$torchrun_fix" = none ] || echo "$torchrun_fix") "$@"
}

case "$mode" in
dry-run)
  # The prebuilt binaries from this build where it has CUDA (stripped, packed,
  # stamped with HEAD); the dry run then checks them and that they start.
  # The CI clone is clean at HEAD; elsewhere the pack is skipped when the
  # tree has changes (the stamp would be stale).
  if grep -q '^GRADCOMP_CUDA:BOOL=ON' "$build/CMakeCache.txt" &&
     [ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
    "$src/tools/device/prepare.sh" --pack "$build" | tail -3
    [ -f "$src/.device/prebuilt.tar.xz" ] || fail "prepare.sh --pack made no pack"
  else
    export GC_BATCH_PREBUILT="$tmp/none.tar.xz"  # a developer's pack may be stale: not this test's
  fi
  "$src/tools/device/gpu_batch.sh" --dry-run "$tmp/out" | tee "$tmp/dry.log"
  if [ -z "${GC_BATCH_PREBUILT:-}" ]; then
    grep -q "test binaries start here" "$tmp/dry.log" || fail "the pack was not checked"
    grep -q "unpack .device/prebuilt.tar.xz" "$tmp/out/plan.txt" || fail "the plan does not use the pack"
  fi
  for part in a-test_gpu_kernels a-park-lazy-kernel a-park-fft-plan a-kbench b1-bit-identical \
              b2-nccl-dense b2-oktopk-reference b2-qsgd-compressed \
              b2-sign b2-wagma b3-net-gradcomp-exact b3-net-socket c-dense c-oktopk-result c-qsgd c-sign \
              c-side-oktopk c-side-off-check c-side-times e-jax-exact e-jax-compressed-result f-sysucx-safe \
              f-sysucx-safe-reference f-sysucx-asis g-fsdp-dense g-fsdp-dense-result g-fsdp-qsgd \
              g-fsdp-qsgd-result; do
    grep -q "^  $part " "$tmp/out/plan.txt" || fail "plan lacks step $part"
  done
  grep -q "carry=\[\".device/debs\", \".device/data\"" "$tmp/out/plan.txt" || fail "plan lacks the run invocation"
  grep -q "GRADCOMP_ALGO=qsgd GRADCOMP_BITS=4" "$tmp/out/plan.txt" || fail "qsgd is not 4 bit"
  grep -q "GRADCOMP_ALGO=oktopk GRADCOMP_DENSITY=0.01" "$tmp/out/plan.txt" || fail "oktopk density is not 0.01"
  grep -q "GRADCOMP_ALGO=off GRADCOMP_RS_ALGO=qsgd GRADCOMP_BITS=4 .*train_fmnist_fsdp.py" "$tmp/out/plan.txt" ||
    fail "part g does not run the FSDP2 example with qsgd 4 bit reduce-scatters"
  grep -q "g-fsdp-qsgd-result .*batch_check.py fsdp .*--dense .*g-fsdp-dense.log" "$tmp/out/plan.txt" ||
    fail "part g does not compare qsgd's accuracy with dense's"
  # A bad option is refused before anything runs.
  if "$src/tools/device/gpu_batch.sh" --parts a,z "$tmp/x" 2>/dev/null; then fail "--parts a,z accepted"; fi
  ;;
stacks)
  # A step that hangs leaves every thread's stack of every process it started
  # (tools/device/run_limited.sh), is killed with its children, exits 124.
  t0=$SECONDS
  rc=0
  # A marker of this run in both command lines, so the survivor check below
  # cannot mistake another process's "sleep 300" for the step's.
  marker="gc-hang-$$-$RANDOM"
  "$src/tools/device/run_limited.sh" 2 "$tmp/stacks.txt" \
    bash -c "(exec -a $marker sleep 300) & exec python3 -c \"import threading, time
threading.Thread(target=time.sleep, args=(300,), name='$marker').start(); time.sleep(300)\"" ||
    rc=$?
  [ $rc = 124 ] || fail "run_limited.sh exited $rc at the limit (want 124)"
  [ $((SECONDS - t0)) -lt 60 ] || fail "run_limited.sh took $((SECONDS - t0)) s for a 2 s limit"
  cat "$tmp/stacks.txt"
  grep -q "reached the limit of 2 s" "$tmp/stacks.txt" || fail "no header in the stacks file"
  [ "$(grep -c '^== process' "$tmp/stacks.txt")" -ge 2 ] || fail "not every process of the step"
  [ "$(grep -c '^-- thread' "$tmp/stacks.txt")" -ge 3 ] || fail "not every thread (python's two, sleep's one)"
  grep -q "wchan" "$tmp/stacks.txt" || fail "no wchan"
  sleep 1
  if pgrep -f "$marker" >/dev/null; then fail "a process of the step survived"; fi
  # Within the limit: the command's own status, no stacks.
  rc=0
  "$src/tools/device/run_limited.sh" 30 "$tmp/none.txt" bash -c 'exit 3' || rc=$?
  [ $rc = 3 ] || fail "run_limited.sh returned $rc for a command that exited 3"
  [ ! -e "$tmp/none.txt" ] || fail "stacks written for a command within its limit"
  echo "stacks: PASS"
  ;;
passthrough|compressed|interleave)
  py="$(torch_python)"
  drv=("$src/tools/device/nccl_driver.py" --backend nccl --device cpu)
  # 4 ranks by gradcomp-run, meeting through a file: no launcher agent and
  # no port to race for (the example test covers torch.distributed.run).
  ranks() { "$build/tools/gradcomp-run/gradcomp-run" -n 4 -- "$py" "$@" --init-file "$(mktemp -u -p "$tmp")"; }
  check=("$py" "$src/tools/device/batch_check.py")
  refcheck="$build/tools/gradcomp-refcheck/gradcomp-refcheck"
  export LD_LIBRARY_PATH="$build/tests/nccl_double${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NCCL_DOUBLE_TIMEOUT_S=60 GRADCOMP_TIMEOUT_S=60
  ;;&
passthrough)
  # The double sums float32 and int32 (sum, avg) and copies the rest: enough
  # for bit-identity, which compares whatever NCCL returned.
  sweep=(--phases sweep,exact --sweep-sizes 1K:256K --sweep-dtypes float,int32,half --sweep-ops sum,avg
         --exact-sizes 1K:1M)
  mkdir -p "$tmp/d1" "$tmp/d2"
  NCCL_DOUBLE_DIR="$tmp/d1" ranks "${drv[@]}" "${sweep[@]}" --out "$tmp/plain"
  NCCL_DOUBLE_DIR="$tmp/d2" LD_PRELOAD="$build/plugin/libgradcomp.so" GRADCOMP_ALGO=off \
    ranks "${drv[@]}" "${sweep[@]}" --out "$tmp/off"
  "${check[@]}" sweeps "$tmp/plain" "$tmp/off"
  "${check[@]}" exact "$tmp/off"
  ;;
compressed)
  [ $# -gt 0 ] || fail "compressed: name the algorithms"
  for algo in "$@"; do
    mkdir -p "$tmp/$algo" "$tmp/d-$algo"
    (
      [ "$algo" = qsgd ] && export GRADCOMP_BITS=4
      export NCCL_DOUBLE_DIR="$tmp/d-$algo" LD_PRELOAD="$build/plugin/libgradcomp.so" GRADCOMP_ALGO="$algo" \
        GRADCOMP_MIN_BYTES=64K GRADCOMP_STATS="$tmp/$algo/stats"
      ranks "${drv[@]}" --phases record,time --record "$tmp/rec-$algo" --out "$tmp/$algo" \
        --record-divisor 8 --time-sizes 256K --time-iters 2 --time-warmup 1
    )
    "$refcheck" "$tmp/rec-$algo"
    "${check[@]}" stats "$tmp/$algo"
  done
  "${check[@]}" times "$tmp" --baseline "$1" | tee "$tmp/times.txt"
  [ "$(grep -c " 262144 " "$tmp/times.txt")" -eq $# ] || fail "the time table lacks runs"
  # The checker fails what is wrong: a compressed result is not the dense
  # sum, and one changed element of one rank's output is not the result.
  rec="$tmp/rec-$1"
  set +e
  "$refcheck" --algo dense "$rec" >/dev/null; [ $? -eq 1 ] || fail "$1's results pass as dense sums"
  printf '\x7f' | dd of="$rec/rank2.call3.out" bs=1 seek=4001 conv=notrunc status=none
  "$refcheck" "$rec" >"$tmp/tampered.txt"; [ $? -eq 1 ] || fail "a changed element passes"
  set -e
  grep "^call 3 .*\[0 0 1 0\].*WRONG" "$tmp/tampered.txt" || fail "the changed element of rank 2 was not found"
  ;;
interleave)
  cat >"$tmp/flag.toml" <<'TOML'
algo = "oktopk"
comms = "index:0"
min_bytes = "64K"
[params]
DENSITY = 0.01
TOML
  side=(--phases interleave --interleave-sizes 256K,1M --interleave-iters 10 --interleave-warmup 2)
  mkdir -p "$tmp/d1" "$tmp/d2"
  lib="$build/plugin/libgradcomp.so"
  NCCL_DOUBLE_DIR="$tmp/d1" LD_PRELOAD="$lib" GRADCOMP_CONFIG="$tmp/flag.toml" \
    GRADCOMP_STATS="$tmp/cmp/stats" ranks "${drv[@]}" "${side[@]}" --out "$tmp/cmp" \
    --label oktopk-vs-dense
  NCCL_DOUBLE_DIR="$tmp/d2" LD_PRELOAD="$lib" GRADCOMP_ALGO=off GRADCOMP_STATS="$tmp/off/stats" \
    ranks "${drv[@]}" "${side[@]}" --interleave-plain real --out "$tmp/off" --label off-vs-nccl
  "${check[@]}" interleave "$tmp/cmp" --expect compressed | tee "$tmp/cmp.txt"
  "${check[@]}" interleave "$tmp/off" --expect passed | tee "$tmp/off.txt"
  [ "$(grep -c '^oktopk-vs-dense ' "$tmp/cmp.txt")" = 2 ] || fail "not one row per size"
  grep -q "plain 24 calls, not seen by the interposer" "$tmp/off.txt" ||
    fail "the real-NCCL communicator went through the interposer"
  # The check fails what is wrong: a run whose flagged communicator did not compress.
  if "${check[@]}" interleave "$tmp/off" --expect compressed >/dev/null; then
    fail "a pass-through run passes as compressed"
  fi
  ;;
jax)
  py=python3
  if ! why="$("$py" -c 'import jax' 2>&1)"; then
    echo "SKIP: $py cannot import jax ($(tail -1 <<<"$why")); the part e script runs on the GPU machine"
    exit 77
  fi
  port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  for inputs in integer normal; do
    "$build/tools/gradcomp-run/gradcomp-run" -n 4 -- "$py" "$src/tools/device/jax_psum.py" --platform cpu \
      --coordinator "127.0.0.1:$port" --inputs $inputs --elements 65536 --calls 3 --warmup 1 \
      --out "$tmp/jax-$inputs"
    port=$((port + 1))
  done
  "$py" "$src/tools/device/batch_check.py" jax "$tmp/jax-integer" --expect exact
  "$py" "$src/tools/device/batch_check.py" jax "$tmp/jax-normal" --expect close --rtol 1e-6
  ;;
example)
  py="$(torch_python)"
  torchrun 2 "$src/examples/pytorch/train_fmnist.py" --max-steps 10 --eval-samples 1000 | tee "$tmp/train.log"
  "$py" "$src/tools/device/batch_check.py" train "$tmp/train.log" --ranks 2 --min-accuracy 0.25
  grep -q '"steps": 10' "$tmp/train.log" || fail "not 10 steps"
  ;;
fsdp-example)
  py="$(torch_python)"
  script="$src/examples/pytorch/train_fmnist_fsdp.py"
  "$py" -m py_compile "$script" || fail "$script does not byte-compile"
  if "$py" -c 'import sys, torch, re
v = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
sys.exit(0 if v >= (2, 4) else 1)'; then
    # FSDP2 on the CPU: gloo has no AVG, so the script forces sum reductions
    # (exit 3 where this FSDP2 cannot: then nothing more to check here).
    rc=0
    torchrun 2 "$script" --max-steps 10 --eval-samples 1000 >"$tmp/fsdp.log" 2>&1 || rc=$?
    cat "$tmp/fsdp.log"
    if [ $rc != 0 ] && grep -q "cannot be asked for sum reduce-scatters" "$tmp/fsdp.log"; then
      echo "fsdp-example: this FSDP2 cannot force sum reductions (gloo needs them): run not checked"
    else
      [ $rc = 0 ] || fail "train_fmnist_fsdp.py on gloo exited $rc"
      "$py" "$src/tools/device/batch_check.py" fsdp "$tmp/fsdp.log" --ranks 2 --min-accuracy 0.25
    fi
  else
    # No process group, no data: the check comes first.
    rc=0
    "$py" "$script" --data "$tmp/no-data" 2>"$tmp/err.txt" || rc=$?
    cat "$tmp/err.txt"
    [ $rc = 3 ] || fail "train_fmnist_fsdp.py exited $rc without FSDP2 (want 3)"
    grep -q "has no FSDP2 (fully_shard): it needs torch >= 2.4" "$tmp/err.txt" ||
      fail "no message naming what is missing"
    grep -q "train_fmnist.py (DDP) runs on this version" "$tmp/err.txt" || fail "the message names no way out"
  fi
  ;;
fsdp-check)
  # Synthetic runs of 4 ranks: RESULT lines as train_fmnist_fsdp.py prints
  # them and stats files as libgradcomp writes them (plugin/nccl/stats.cc).
  python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def run(name, acc, compressed=(150, 150, 150, 150), sharding="fully_shard", rs=True, missing=(),
        ag=None, ag_wire=0.0):
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    with open(os.path.join(tmp, name + ".log"), "w") as f:
        f.write("train_fmnist_fsdp: 4 ranks, nccl\nepoch 1: steps 150, test accuracy %.4f\n" % acc)
        for r in range(4):
            res = {"rank": r, "ranks": 4, "epochs": 1, "steps": 150, "accuracy": acc, "step_ms": 40.0,
                   "params_sha256": "ab" * 32, "reduce_op": "avg", "reduce_dtype": "float32"}
            if sharding:
                res["sharding"] = sharding
            f.write("[rank%d]:RESULT %s\n" % (r, json.dumps(res)))
    for r, n in enumerate(compressed):
        if r in missing:
            continue
        comm = {"index": 0, "rank": r, "nranks": 4, "calls_compressed": n, "calls_passed": 450,
                "disabled_reason": "", "pass_reasons": {"below GRADCOMP_MIN_BYTES": 450}}
        if rs:
            comm["reduce_scatter"] = {"calls_compressed": n, "calls_passed": 450,
                                      "logical_bytes": n * 1607680, "wire_bytes": n * 150720,
                                      "passed_bytes": 450 * 20000}
        if ag:  # wire bytes: ag_wire of the logical ones (0: the CUDA executor counts none)
            comm["allgather"] = {"calls_compressed": ag[r], "calls_passed": 600,
                                 "logical_bytes": ag[r] * 1607680,
                                 "wire_bytes": int(ag[r] * 1607680 * ag_wire),
                                 "passed_bytes": 600 * 20000}
        with open(os.path.join(tmp, name, "stats.rank%d.json" % r), "w") as f:
            json.dump({"pid": 100 + r, "rank": r, "communicators": [comm]}, f)
run("dense", 0.80)
run("qsgd", 0.79)
run("lost", 0.70)
run("rank2-none", 0.79, compressed=(150, 150, 0, 150))
run("rank3-missing", 0.79, missing=(3,))
run("old-lib", 0.79, rs=False)
run("ddp", 0.79, sharding=None)
run("blockq", 0.79, ag=(300, 300, 300, 300))
run("blockq-cpu", 0.79, ag=(300, 300, 300, 300), ag_wire=0.19)
run("ag-rank1-none", 0.79, ag=(300, 0, 300, 300))
run("ag-dense-bytes", 0.79, ag=(300, 300, 300, 300), ag_wire=0.75)
PY
  check=(python3 "$src/tools/device/batch_check.py" fsdp)
  "${check[@]}" "$tmp/dense.log" --stats "$tmp/dense" | tee "$tmp/dense.txt"
  "${check[@]}" "$tmp/qsgd.log" --stats "$tmp/qsgd" --dense "$tmp/dense.log" --band 0.05 | tee "$tmp/qsgd.txt"
  grep -q "^PASS FSDP2 avg float32: accuracy 0.7900 after 150 steps.*(dense 0.8000 after 150 steps" \
    "$tmp/qsgd.txt" || fail "the verdict does not compare with dense"
  grep -q "compressed reduce-scatters per rank \[150, 150, 150, 150\]" "$tmp/qsgd.txt" ||
    fail "the verdict lacks the compressed reduce-scatters per rank"
  grep -q "pass reasons (all ranks) {'below GRADCOMP_MIN_BYTES': 1800}" "$tmp/qsgd.txt" ||
    fail "the verdict does not list the pass-through reasons"
  # What must fail, and why.
  expect_fail() {
    local name="$1" why="$2"
    shift 2
    if "${check[@]}" "$tmp/$name.log" --stats "$tmp/$name" "$@" >"$tmp/$name.txt"; then
      cat "$tmp/$name.txt"
      fail "$name passes"
    fi
    grep -q "$why" "$tmp/$name.txt" || { cat "$tmp/$name.txt"; fail "$name fails without '$why'"; }
    echo "fails as it should: $name ($why)"
  }
  expect_fail lost "accuracy 0.7000 is below dense 0.8000 - 0.05" --dense "$tmp/dense.log"
  expect_fail rank2-none "rank 2 compressed no reduce-scatter"
  expect_fail rank3-missing "rank 3 wrote no stats file"
  expect_fail old-lib "no \"reduce_scatter\" in its stats"
  expect_fail ddp "not train_fmnist_fsdp.py's RESULT lines"
  expect_fail qsgd "RESULT lines from ranks \[0, 1, 2, 3\], expected 8 ranks" --ranks 8
  # --allgather (the blockq case): every rank compressed allgathers, in
  # fewer bytes where they were counted.
  for ok in blockq blockq-cpu; do
    "${check[@]}" "$tmp/$ok.log" --stats "$tmp/$ok" --allgather | tee "$tmp/$ok.txt"
  done
  grep -q "compressed allgathers per rank \[300, 300, 300, 300\], logical/wire \[None" \
    "$tmp/blockq.txt" || fail "the verdict lacks the compressed allgathers per rank"
  expect_fail ag-rank1-none "rank 1 compressed no allgather" --allgather
  expect_fail ag-dense-bytes "rank 0: allgather wire bytes .* are not under half" --allgather
  expect_fail qsgd "rank 0: no \"allgather\" in its stats" --allgather
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
echo "device_batch_test $mode: ok"

#!/usr/bin/env bash
# The GPU batch: everything in gradcomp that needs a GPU, in one command. One
# log per step (in OUTDIR/logs.tar.gz) and one line per step in
# OUTDIR/summary.txt:
#   PASS|FAIL <step> (<seconds> s, exit <code>): <the step's last output line>
#
# 1. On the CPU machine (downloads the .debs, copies the dataset, builds,
#    strips and packs the binaries, checks that everything carried exists, is
#    current and fits, prints the plan):
#      tools/device/prepare.sh --pack && tools/device/gpu_batch.sh --dry-run
# 2. With the `run` device tool: with 15 minutes of device time (Nov 2026; the
#    machine goes back 30 s after a call), one full call and, at once while it
#    is warm, a short one with --budget = what `status` leaves less 40 s:
#      run(command='tools/device/gpu_batch.sh --parts a,b2,c --c-cases dense,oktopk --budget 540 "$OUT"', carry=[".device/debs", ".device/data", ".device/prebuilt.tar.xz"])
#      run(command='tools/device/gpu_batch.sh --parts f,e,b1,b3,d,g --budget 200 "$OUT"', carry=[".device/debs", ".device/data", ".device/prebuilt.tar.xz"])
#    (with 30 minutes: --parts a,b2,f,e, then --parts c,b1,b3,d,g, 570 s each)
#    or one call of under 5 minutes with --quick (a, b2 oktopk, c oktopk 1 epoch):
#      run(command='tools/device/gpu_batch.sh --quick "$OUT"',         carry=[".device/debs", ".device/data", ".device/prebuilt.tar.xz"])
#
# Parts (--parts, comma list; default all):
#   a   every [gpu] test (tests/test_gpu_*.cc) and the executor tests,
#       gradcomp-parkprobe (which host CUDA calls stall while a stream is
#       parked: one RESULT line per call), and
#       gradcomp-kbench (each kernel's GB/s as a fraction of a device-to-device
#       copy measured in the same run; its --check verdict, issue 33's goal,
#       as an INFO line of the summary)
#   b1  NCCL pass-through: tools/device/nccl_driver.py sweeps 1K..64M x
#       float/half/bfloat16/int32 x sum/avg/max x in/out of place without
#       LD_PRELOAD and with LD_PRELOAD=libgradcomp.so GRADCOMP_ALGO=off: the
#       outputs must be bit-identical; the pass-through's time beside NCCL's
#   b2  compressed allreduce (oktopk, qsgd 4 bit, sign, wagma): every rank's
#       output equals the CPU Reference's on the same inputs (gradcomp-refcheck
#       replays the recorded calls), the stats prove every call was compressed,
#       and the time per call beside NCCL's dense allreduce timed first
#   b3  NCCL's own allreduce over the gradcomp net plugin (NCCL_NET_PLUGIN,
#       NCCL_NET=gradcomp): exact results; busbw beside NCCL's Socket transport
#   d   CollNet (issue 23): NCCL's allreduce with NCCL_COLLNET_ENABLE=1,
#       NCCL_COLLNET_NODE_THRESHOLD=1 and the gradcomp net plugin (whose
#       tuner prefers CollNet): dense must be exact, qsgd 4 bit runs, and the
#       CollNet stats prove NCCL handed gradcomp the chunks
#   c   side by side in one job first (nccl_driver.py --phases interleave):
#       two communicators in the same 4 ranks, calls alternating, medians of
#       12 calls each at 4M and 64M: oktopk on the one a GRADCOMP_CONFIG file
#       flags (comms = "index:0") against NCCL's dense on the other, and the
#       pass-through (GRADCOMP_ALGO=off) against NCCL's own pncclAllReduce;
#       ms per call and ratios into the summary. Then
#       examples/pytorch/train_fmnist.py (DDP, no gradcomp import) for 2
#       epochs: dense, oktopk (density 0.01), qsgd 4 bit, sign: accuracy, step
#       time, and gradcomp's stats proving the allreduces were compressed
#   e   JAX: tools/device/jax_psum.py, jax.lax.psum over the 4 ranks through
#       gradcomp's forwarding libnccl.so.2 (plugin/shim) with libgradcomp.so
#       preloaded: exact (GRADCOMP_ALGO=off, integer inputs) and compressed
#       (qsgd 8 bit: close to the exact sum, the stats show compressed calls)
#   f   b2's oktopk with the GPU image's own UCX (/lib/x86_64-linux-gnu,
#       1.16.0 with CUDA modules) instead of the carried 1.13: gradcomp's
#       GRADCOMP_UCX_CUDA=safe defaults (transport/ucx_cuda_env.h), Reference
#       and stats checks as in b2; then the control, GRADCOMP_UCX_CUDA=asis
#       (UCX's own defaults: a rank died of SIGSEGV so in the 2026-11-28 run)
#   g   FSDP2 (issue 34): examples/pytorch/train_fmnist_fsdp.py (fully_shard
#       per layer, no gradcomp import; gradients reduce-scattered with
#       ncclAvg) under LD_PRELOAD, 1 epoch cut at 150 steps, GRADCOMP_ALGO=off
#       and GRADCOMP_RS_ALGO=dense, then qsgd 4 bit, then dense with
#       GRADCOMP_AG_ALGO=blockq (issue 42: the parameter allgathers int8 through
#       the CUDA blockq kernels): the stats prove every rank compressed
#       reduce-scatters (pass reasons listed) and, for blockq, allgathers;
#       qsgd's and blockq's accuracy within 0.05 of dense's
# Ranks: 4 processes on the one GPU, each its own NCCL_HOSTID
# (tools/device/rank_env.sh), NCCL_MNNVL_ENABLE=0, loopback sockets.
#
# Setup before the parts (every call; a no-op when already done on a warm
# machine): unpack .device/debs into .device/root (never into /), configure
# and build in .device/build with CUDA for the local GPU. Recordings go to
# .device/work (large, not returned). Each step has a time limit; a step that
# fails does not stop the others (only a failed setup does).
#
# The binaries: .device/prebuilt.tar.xz when it is carried (tools/device/
# prepare.sh --pack builds, strips and packs them on the CPU machine; the dry
# run checks it is current for HEAD); --build, or no pack, configures and
# builds on the GPU machine instead (minutes of the device time).
#
#   tools/device/gpu_batch.sh [--dry-run] [--quick] [--build] [--parts LIST] [--c-cases LIST] [--budget S] OUTDIR
# OUTDIR receives summary.txt, environment.txt and logs.tar.gz (the run tool
# returns at most 8 files). --budget S (default 570, with --quick 290): no
# step starts or runs past S seconds after the start, so the batch ends and
# packs its logs before the run tool's 600 s limit. Exit status: 0 when every
# step passed (dry run: when every check passed).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { sed -n '/^#   tools\/device\/gpu_batch.sh \[/p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }

dry=0 quick=0 parts="" out="" budget="" build_there=0 c_cases_arg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --build) build_there=1 ;;
    --quick) quick=1 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift ;;
    --parts) parts="${2:?--parts needs a list}"; shift ;;
    --c-cases) c_cases_arg="${2:?--c-cases needs a list}"; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu_batch.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || usage; out="$1" ;;
  esac
  shift
done
[ -n "$out" ] || [ $dry = 1 ] || usage
b2_algos="oktopk qsgd sign wagma" c_cases="dense oktopk qsgd sign" epochs=2 time_sizes=4M,64M
side_sizes=4M,64M  # part c's side-by-side timings
if [ $quick = 1 ]; then
  parts="${parts:-a,b2,c}" b2_algos=oktopk c_cases=oktopk epochs=1 time_sizes=4M budget="${budget:-290}"
  side_sizes=4M
fi
budget="${budget:-570}"
[ -z "$c_cases_arg" ] || c_cases="${c_cases_arg//,/ }"
for c in $c_cases; do
  case "$c" in dense|oktopk|qsgd|sign) ;; *) echo "gpu_batch.sh: unknown --c-cases entry '$c' (dense, oktopk, qsgd, sign)" >&2; exit 2 ;; esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu_batch.sh: --budget takes whole seconds" >&2; exit 2; }
parts=",${parts:-a,b1,b2,b3,c,d,e,f,g},"
plist="$(echo ${parts//,/ })"
for p in ${parts//,/ }; do
  case "$p" in a|b1|b2|b3|c|d|e|f|g) ;; *) echo "gpu_batch.sh: unknown part '$p' (a, b1, b2, b3, c, d, e, f, g)" >&2; exit 2 ;; esac
done
has() { [[ "$parts" == *",$1,"* ]]; }

carry=(.device/debs .device/data)
prebuilt="${GC_BATCH_PREBUILT:-$root/.device/prebuilt.tar.xz}"  # tools/device/prepare.sh --pack
[ -f "$prebuilt" ] && carry+=(.device/prebuilt.tar.xz)
carry_limit=$((64 << 20))  # the run tool's limit on the working tree plus carry
sysroot="$root/.device/root" build="$root/.device/build" work="$root/.device/work"
logs="$work/logs"  # step logs and files; packed into OUTDIR/logs.tar.gz after every step
data="$root/.device/data/fashion-mnist"
arch=x86_64-linux-gnu
lib="$build/plugin/libgradcomp.so"
driver="$root/tools/device/nccl_driver.py" check="$root/tools/device/batch_check.py"
refcheck="$build/tools/gradcomp-refcheck/gradcomp-refcheck"
shim="$build/plugin/shim/lib"  # the forwarding libnccl.so.2 (part e)
jax_script="$root/tools/device/jax_psum.py"
example="$root/examples/pytorch/train_fmnist.py"
fsdp_example="$root/examples/pytorch/train_fmnist_fsdp.py"
fsdp_steps=150  # part g: one epoch is 234 steps of 4 x 64; 150 fit the 90 s limit
gpu_tests="$(cd "$root/tests" && ls test_gpu_*.cc | sed 's/\.cc$//' | tr '\n' ' ')test_executor_protocol test_backend_memory"
build_targets="gradcomp gradcomp_nccl_shim gradcomp-refcheck gradcomp-kbench gradcomp-parkprobe"
build_targets="$build_targets $gpu_tests"
torchrun=(python3 -m torch.distributed.run --standalone --nproc_per_node 4 --no_python
          "$root/tools/device/rank_env.sh" python3)
out="${out:+$(mkdir -p "$out" && cd "$out" && pwd)}"

# The environment of every step: the unpacked packages first on the search
# paths, and NCCL set up for several ranks on one GPU over loopback.
sysroot_env() {
  local s="$1"
  export PATH="$s/usr/bin:/usr/local/cuda/bin:$PATH"
  export LD_LIBRARY_PATH="$s/usr/lib/$arch:$s/usr/lib/$arch/openblas-pthread:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_SYSROOT_DIR="$s"
  export PKG_CONFIG_LIBDIR="$s/usr/lib/$arch/pkgconfig:$s/usr/share/pkgconfig:$s/usr/lib/$arch/openblas-pthread/pkgconfig"
  export UCX_MODULE_DIR="$s/usr/lib/$arch/ucx"
}
export NCCL_MNNVL_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 GLOO_SOCKET_IFNAME=lo GRADCOMP_NET_IFNAME=lo

# Every carried package into $1 (a project folder, never /): dpkg -x, or
# where there is no dpkg (or with $2 = python) tools/device/unpack_debs.py.
unpack_debs() {
  mkdir -p "$1" || return 1
  if [ "${2:-}" = python ] || ! command -v dpkg >/dev/null; then
    python3 "$root/tools/device/unpack_debs.py" "$1" "$root"/.device/debs/*.deb
  else
    for deb in "$root"/.device/debs/*.deb; do dpkg -x "$deb" "$1" || return 1; done
  fi
}

summary() { echo "$*" | tee -a "$out/summary.txt"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
rel() { local s="$*"; echo "${s//$root\//}"; }
# Shell words as a copyable line: plain words as they are, others quoted.
words() {
  local w line="" plain='^[-A-Za-z0-9_,:=/.+@%$]+$'
  for w in "$@"; do
    [[ "$w" =~ $plain ]] || w="$(printf '%q' "$w")"
    line+="$w "
  done
  echo "${line% }"
}

# The run tool returns at most 8 files from $OUT and kills the command at 10
# minutes: OUTDIR gets summary.txt, environment.txt and logs.tar.gz (every
# step's log and files), repacked after each step, and no step may run past
# the batch's --budget (seconds since start), so the batch ends cleanly.
pack() { cp "$out/summary.txt" "$out/environment.txt" "$logs/" 2>/dev/null; tar -czf "$out/logs.tar.gz" -C "$work" logs; }

# step NAME LIMIT_S CMD...: runs CMD (stdout and stderr into LOGS/NAME.log)
# under tools/device/run_limited.sh (LIMIT_S, cut to what the budget leaves:
# a step that reaches it leaves every thread's stack of its processes in
# LOGS/NAME.stacks.txt, then is killed), then appends its PASS/FAIL line.
# Limits come from what a step needs (a test binary 60 s, a 4-rank driver run
# 90 s), so one hang cannot eat the budget. Dry run: prints it.
failed=0 plan_limits=0
step() {
  local name="$1" limit="$2"
  shift 2
  if [ $dry = 1 ]; then
    printf '  %-24s %4ss  %s\n' "$name" "$limit" "$(rel "$(words "$@")")"
    plan_limits=$((plan_limits + limit))
    return 0
  fi
  local t0=$SECONDS rc last left=$((budget - SECONDS - 15))
  if [ $left -lt 20 ]; then
    failed=1
    summary "FAIL $name: not run, the --budget of $budget s is spent"
    return 1
  fi
  [ "$limit" -le $left ] || limit=$left
  "$root/tools/device/run_limited.sh" "$limit" "$logs/$name.stacks.txt" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  last="$(grep -v '^[[:space:]]*$' "$logs/$name.log" | tail -1 | cut -c1-300)"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && last="timed out after ${limit} s (stacks: $name.stacks.txt); $last"
  [ $rc -eq 4 ] && grep -q "no CUDA device" "$logs/$name.log" && last="skipped: no CUDA device; $last"
  [ $rc -eq 0 ] || failed=1
  summary "$([ $rc -eq 0 ] && echo PASS || echo FAIL) $name ($((SECONDS - t0)) s, exit $rc): $last"
  pack
  return $rc
}
# A folder under OUTDIR for a step's files (created unless dry).
outdir() { [ $dry = 1 ] || mkdir -p "$logs/$1"; echo "$logs/$1"; }
params() {  # the GRADCOMP_* parameters of a case
  case "$1" in
    oktopk) echo GRADCOMP_DENSITY=0.01 ;;
    qsgd) echo GRADCOMP_BITS=4 ;;
    blockq) echo GRADCOMP_AG_ALGO=blockq ;;  # part g: int8 (GRADCOMP_BITS unset)
    *) ;;
  esac
}

# ---- dry run: prepare and check the carry, then print the plan ------------
dry_checks() {
  local ok=1 tmp bytes tree
  "$root/tools/device/prepare.sh" || return 1
  for c in "${carry[@]}"; do
    [ -e "$root/$c" ] || { echo "carry: $c missing"; ok=0; }
    git -C "$root" check-ignore -q "$c" || { echo "carry: $c is not git-ignored (the run tool carries only ignored paths by name)"; ok=0; }
  done
  for p in $(grep -v '^#' "$root/tools/device/packages.txt"); do
    local n
    n=$(compgen -G "$root/.device/debs/${p}_*.deb" | wc -l)
    [ "$n" -eq 1 ] || { echo "carry: $n .deb files for $p in .device/debs (want 1; rm -rf .device/debs and rerun)"; ok=0; }
  done
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -s "$data/$f" ] || { echo "carry: $data/$f missing"; ok=0; }
  done
  for f in "$driver" "$check" "$example" "$fsdp_example" "$jax_script" "$root/tools/device/rank_env.sh" \
           "$root/tools/device/packages.txt" "$root/tools/device/unpack_debs.py"; do
    [ -f "$f" ] || { echo "missing $f"; ok=0; }
  done
  # The prebuilt binaries: built from HEAD, and they start on this machine
  # (the [gpu] tests skip with exit 4 without a device).
  if [ -f "$prebuilt" ]; then
    tmp="$(mktemp -d)"
    if ! tar -xJf "$prebuilt" -C "$tmp"; then
      echo "prebuilt: $prebuilt does not unpack"; ok=0
    else
      local head built dirty
      head=$(git -C "$root" rev-parse HEAD) built=$(awk '/^commit/ {print $2}' "$tmp/PREBUILT")
      dirty=$(awk '/^dirty/ {print $2}' "$tmp/PREBUILT")
      [ "$built" = "$head" ] && [ "$dirty" = 0 ] ||
        { echo "prebuilt: built from ${built:-?} with $dirty changed files, HEAD is $head: run tools/device/prepare.sh --pack"; ok=0; }
      for t in $gpu_tests; do
        [ -x "$tmp/tests/$t" ] || { echo "prebuilt: tests/$t missing"; ok=0; continue; }
        # Catch2 lists (its exit status is the number of tests).
        [ -n "$("$tmp/tests/$t" --list-test-names-only 2>/dev/null)" ] ||
          { echo "prebuilt: tests/$t does not start"; ok=0; }
      done
      if [ -x "$tmp/tests/test_gpu_backend" ] && ! nvidia-smi -L >/dev/null 2>&1; then
        "$tmp/tests/test_gpu_backend" >/dev/null 2>&1
        [ $? = 4 ] || { echo "prebuilt: tests/test_gpu_backend did not skip (exit 4) without a GPU"; ok=0; }
      fi
      [[ "$("$tmp/tools/gradcomp-refcheck/gradcomp-refcheck" --help 2>&1)" == *usage* ]] ||
        { echo "prebuilt: gradcomp-refcheck --help printed no usage"; ok=0; }
      [[ "$("$tmp/tools/gradcomp-parkprobe/gradcomp-parkprobe" 2>&1)" == *usage* ]] ||
        { echo "prebuilt: gradcomp-parkprobe printed no usage"; ok=0; }
      [ -f "$tmp/plugin/libgradcomp.so" ] && [ -L "$tmp/plugin/libnccl-net-gradcomp.so" ] ||
        { echo "prebuilt: plugin libraries missing"; ok=0; }
      [ -f "$tmp/plugin/shim/lib/libnccl.so.2" ] || { echo "prebuilt: the shim (plugin/shim/lib/libnccl.so.2) is missing"; ok=0; }
      echo "prebuilt: $(mib "$(stat -c %s "$prebuilt")") MiB packed, $(head -1 "$tmp/PREBUILT"), $(wc -w <<<"$gpu_tests") test binaries start here"
    fi
    rm -rf "$tmp"
  else
    echo "prebuilt: no .device/prebuilt.tar.xz: the GPU machine will configure and build (tools/device/prepare.sh --pack avoids that)"
  fi
  # What travels: tracked and untracked-but-not-ignored files, plus the carry.
  tree=$(cd "$root" && git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  bytes=$(( tree + $(du -sb "${carry[@]/#/$root/}" | awk '{s += $1} END {print s + 0}') ))
  echo "carry: working tree $(mib "$tree") MiB + $(du -sb "${carry[@]/#/$root/}" |
    awk -v r="$root/" '{sub(r, "", $2); printf "%s %.1f MiB + ", $2, $1 / 1048576}' | sed 's/ + $//') = $(mib "$bytes") MiB of $((carry_limit >> 20)) MiB"
  [ "$bytes" -le "$carry_limit" ] || { echo "carry: over the limit"; ok=0; }

  # The unpacked packages alone must satisfy the build's dependencies: the
  # pkg-config modules resolve inside the sysroot, and a configure without
  # CUDA finds every package there (not on this machine's /usr). Unpacked by
  # unpack_debs.py, the fallback for a GPU machine without dpkg.
  tmp="$(mktemp -d)"
  unpack_debs "$tmp/root" python || { echo "unpack: unpack_debs.py failed"; rm -rf "$tmp"; return 1; }
  (
    sysroot_env "$tmp/root"
    for m in ucx hwloc fftw3f openblas; do
      pkg-config --exists "$m" || { echo "unpack: pkg-config module $m not in the packages"; exit 1; }
    done
    for f in usr/lib/cmake/Catch2/Catch2Config.cmake usr/include/toml++/toml.h usr/lib/$arch/libucp.so.0 \
             usr/lib/$arch/libz.so usr/lib/$arch/ucx; do
      [ -e "$tmp/root/$f" ] || { echo "unpack: $f not in the packages"; exit 1; }
    done
    cmake -G Ninja -S "$root" -B "$tmp/build" -DGRADCOMP_CUDA=OFF -DCMAKE_PREFIX_PATH="$tmp/root/usr" \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
      >"$tmp/configure.log" 2>&1 || { tail -20 "$tmp/configure.log"; echo "configure against the packages failed"; exit 1; }
    for key in pkgcfg_lib_UCX_ucp pkgcfg_lib_HWLOC_hwloc pkgcfg_lib_FFTW3F_fftw3f pkgcfg_lib_OPENBLAS_openblas \
               Catch2_DIR ZLIB_LIBRARY_RELEASE; do
      value=$(grep -E "^$key:[A-Z]+=" "$tmp/build/CMakeCache.txt" | cut -d= -f2-)
      [[ "$value" == "$tmp/root/"* ]] || { echo "configure: $key is '$value', not from the packages"; exit 1; }
    done
    echo "unpack: $(ls "$root"/.device/debs/*.deb | wc -l) packages unpack; configure finds UCX, hwloc, FFTW, OpenBLAS, Catch2, zlib in them"
  ) || ok=0
  rm -rf "$tmp"
  for f in "$driver" "$check" "$example" "$fsdp_example" "$jax_script" "$root/tools/device/unpack_debs.py" \
           "$root/tools/device/results_table.py"; do
    python3 -m py_compile "$f" 2>&1 || { echo "syntax: $f"; ok=0; }
  done
  for f in "${BASH_SOURCE[0]}" "$root/tools/device/rank_env.sh" "$root/tools/device/prepare.sh"; do
    bash -n "$f" || ok=0
  done
  [ $ok = 1 ]
}

# ---- setup on the GPU machine ----------------------------------------------
setup() {
  local stamp="$sysroot/.unpacked" newest
  newest=$(ls -t "$root"/.device/debs/*.deb 2>/dev/null | head -1)
  [ -n "$newest" ] || { summary "FAIL setup: no .device/debs/*.deb (carry .device/debs; tools/device/prepare.sh makes it)"; return 1; }
  if [ ! -e "$stamp" ] || [ "$newest" -nt "$stamp" ]; then
    step unpack 120 bash -c "$(declare -f unpack_debs); root='$root'; unpack_debs '$sysroot'" && touch "$stamp" || return 1
  fi
  {
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
    nvcc --version | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
    compute-sanitizer --version 2>&1 | head -1
    git -C "$root" log -1 --format='commit %H %s' 2>/dev/null ||
      echo "commit: unknown here (no .git in this copy): note the commit the batch was sent from"
  } >"$out/environment.txt" 2>&1
  sed 's/^/  /' "$out/environment.txt"
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  if [ $build_there = 0 ] && [ -f "$prebuilt" ]; then
    # The binaries built on the CPU machine: nothing to configure or build.
    rm -rf "$build" && mkdir -p "$build"
    step unpack-prebuilt 60 tar -xJf "$prebuilt" -C "$build" || return 1
    sed 's/^/prebuilt: /' "$build/PREBUILT" | tee -a "$out/environment.txt"
    return 0
  fi
  [ -f "$build/build.ninja" ] ||
    step configure 300 cmake -G Ninja -S "$root" -B "$build" -DGRADCOMP_CUDA=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=${cc:-90}" -DCMAKE_PREFIX_PATH="$sysroot/usr" \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 || return 1  # CMake 4 and Debian's older package config files
  # shellcheck disable=SC2086
  step build 480 cmake --build "$build" -j "$(nproc)" --target $build_targets || return 1
}

# ---- the parts ------------------------------------------------------------
part_a() {
  for t in $gpu_tests; do
    step "a-$t" 60 "$build/tests/$t" -r console -d yes
  done
  # Which host-side CUDA calls stall while a stream is parked (the proxy
  # contract's "never" column, measured; one process per call, each ended by
  # its own 6 s timer: RESULT lines, informational).
  local pp="$build/tools/gradcomp-parkprobe/gradcomp-parkprobe" probe
  for probe in lazy-kernel host-alloc malloc event-create reserve-device fft-plan free free-host; do
    step "a-park-$probe" 15 "$pp" "$probe" 6
  done
  local kb="$build/tools/gradcomp-kbench/gradcomp-kbench" kj
  kj="$(outdir a-kbench)/kbench.json"
  step a-kbench 120 "$kb" -J "$kj"
  # Issue 33's goal, printed (not a failure of the batch): streaming kernels
  # >= 0.7 of the copy from 16 M elements on, selection kernels >= 0.4.
  if [ $dry = 1 ]; then
    printf '  %-24s %4ss  %s\n' a-kbench-check 5 "$(rel "$kb") --check 0.7 --from-json $(rel "$kj")"
  elif [ -f "$kj" ]; then
    "$kb" --check 0.7 --select-check 0.4 --from-json "$kj" >"$logs/a-kbench-check.log" 2>&1
    summary "INFO a-kbench-check: $(tail -1 "$logs/a-kbench-check.log") (a-kbench-check.log)"
  fi
}

part_b1() {
  step b1-nccl-dense 120 "${torchrun[@]}" "$driver" --phases sweep,time --out "$(outdir b1-nccl-dense)" \
    --label nccl-dense --time-sizes "$time_sizes"
  step b1-preload-off 120 env LD_PRELOAD="$lib" GRADCOMP_ALGO=off GRADCOMP_DEBUG=INFO "${torchrun[@]}" "$driver" \
    --phases sweep,time --out "$(outdir b1-preload-off)" --label preload-off --time-sizes "$time_sizes"
  step b1-bit-identical 120 python3 "$check" sweeps "$logs/b1-nccl-dense" "$logs/b1-preload-off"
  step b1-times 60 python3 "$check" times "$logs" --runs 'b1-*' --baseline nccl-dense
  [ ! -f "$logs/b1-times.log" ] || sed 's/^/    /' "$logs/b1-times.log" >>"$out/summary.txt"
}

part_b2() {
  step b2-nccl-dense 90 "${torchrun[@]}" "$driver" --phases time --out "$(outdir b2-nccl-dense)" \
    --label nccl-dense --time-sizes "$time_sizes"
  for algo in $b2_algos; do
    local dir
    dir="$(outdir "b2-$algo")"
    # shellcheck disable=SC2046
    step "b2-$algo" 90 env LD_PRELOAD="$lib" GRADCOMP_ALGO="$algo" $(params "$algo") GRADCOMP_MIN_BYTES=64K \
      GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO "${torchrun[@]}" "$driver" --phases record,time \
      --record "$work/record-$algo" --out "$dir" --label "$algo" --time-sizes "$time_sizes"
    step "b2-$algo-reference" 90 "$refcheck" "$work/record-$algo"
    step "b2-$algo-compressed" 60 python3 "$check" stats "$dir"
    # The proxy contract held: no call grew memory or made a plan while its
    # stream was parked (GRADCOMP_PROXY_CHECK=warn logs each one).
    step "b2-$algo-contract" 10 bash -c "! grep -m3 'proxy contract broken' '$logs/b2-$algo.log'"
  done
  # Placement and routes (issue 21), from the first compressed run's INFO log:
  # the proxy thread bound near its GPU (or why not), every rank's UCX routes.
  local first=${b2_algos%% *}
  step b2-placement 10 grep -m1 -E "CUDA executor proxy of device [0-9]+ (bound to|runs unbound)" \
    "$logs/b2-$first.log"
  step b2-routes 10 grep -m1 "routes: same host" "$logs/b2-$first.log"
  step b2-times 60 python3 "$check" times "$logs" --runs 'b2-*' --baseline nccl-dense
  [ ! -f "$logs/b2-times.log" ] || sed 's/^/    /' "$logs/b2-times.log" >>"$out/summary.txt"
}

part_b3() {
  local net
  for net in gradcomp Socket; do
    local name="b3-net-${net,,}" env=(NCCL_NET="$net" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)
    [ $net = gradcomp ] && env+=(NCCL_NET_PLUGIN="$build/plugin/libnccl-net-gradcomp.so" GRADCOMP_DEBUG=INFO)
    step "$name" 120 env "${env[@]}" "${torchrun[@]}" "$driver" --phases exact,time --out "$(outdir "$name")" \
      --label "net-${net,,}" --exact-sizes 1K:64M --time-sizes 1M,16M,64M
    step "$name-exact" 60 python3 "$check" exact "$logs/$name"
  done
  step b3-net-gradcomp-loaded 10 grep -m1 "net plugin: UCX" "$logs/b3-net-gradcomp.log"
  step b3-times 60 python3 "$check" times "$logs" --runs 'b3-*' --baseline net-socket
  [ ! -f "$logs/b3-times.log" ] || sed 's/^/    /' "$logs/b3-times.log" >>"$out/summary.txt"
}

part_d() {
  local algo
  for algo in dense qsgd; do
    local name="d-collnet-$algo" dir
    dir="$(outdir "$name")"
    # shellcheck disable=SC2046
    step "$name" 120 env NCCL_NET_PLUGIN="$build/plugin/libnccl-net-gradcomp.so" NCCL_NET=gradcomp \
      NCCL_COLLNET_ENABLE=1 NCCL_COLLNET_NODE_THRESHOLD=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL,TUNING \
      GRADCOMP_ALGO="$algo" $(params "$algo") GRADCOMP_MIN_BYTES=64K GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO \
      "${torchrun[@]}" "$driver" --phases $([ $algo = dense ] && echo exact,time || echo time) --out "$dir" \
      --label "collnet-$algo" --exact-sizes 1M:64M --time-sizes 4M,64M
    [ $algo = dense ] && step "$name-exact" 60 python3 "$check" exact "$logs/$name"
    step "$name-called" 60 python3 "$check" collnet "$dir"
  done
}

# Side by side in one job (issue 31, nccl_driver.py --phases interleave): in
# the same 4 rank processes the communicator a GRADCOMP_CONFIG file flags
# (comms = "index:0", oktopk) and one it does not (NCCL's dense through the
# interposer's pass-through), calls alternating; then the pass-through
# overhead: GRADCOMP_ALGO=off on the first against NCCL's own pncclAllReduce
# on the second (never seen by the interposer). Medians of 12 calls each.
part_c_side() {
  local side=(--phases interleave --interleave-sizes "$side_sizes" --interleave-iters 12 --interleave-warmup 3)
  local cfg="$work/flag-oktopk.toml" dir
  [ $dry = 1 ] || printf 'algo = "oktopk"\ncomms = "index:0"\nmin_bytes = "64K"\n[params]\nDENSITY = 0.01\n' >"$cfg"
  dir="$(outdir c-side-oktopk)"
  step c-side-oktopk 90 env LD_PRELOAD="$lib" GRADCOMP_CONFIG="$cfg" GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO \
    "${torchrun[@]}" "$driver" "${side[@]}" --out "$dir" --label oktopk-vs-dense
  step c-side-oktopk-check 30 python3 "$check" interleave "$dir" --expect compressed
  dir="$(outdir c-side-off)"
  step c-side-off 90 env LD_PRELOAD="$lib" GRADCOMP_ALGO=off GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO \
    "${torchrun[@]}" "$driver" "${side[@]}" --interleave-plain real --out "$dir" --label off-vs-nccl
  step c-side-off-check 30 python3 "$check" interleave "$dir" --expect passed
  step c-side-times 30 python3 "$check" interleave "$logs/c-side-oktopk" "$logs/c-side-off"
  [ ! -f "$logs/c-side-times.log" ] || sed 's/^/    /' "$logs/c-side-times.log" >>"$out/summary.txt"
}

part_c() {
  part_c_side
  for case in $c_cases; do
    local dir preload=()
    dir="$(outdir "c-$case")"
    [ "$case" = dense ] || preload=(LD_PRELOAD="$lib" GRADCOMP_ALGO="$case" $(params "$case") GRADCOMP_MIN_BYTES=64K
                                    GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO)
    step "c-$case" 420 env "${preload[@]}" "${torchrun[@]}" "$example" --data "$data" --epochs "$epochs"
    if [ "$case" = dense ]; then
      step "c-$case-result" 60 python3 "$check" train "$logs/c-$case.log" --min-accuracy 0.5
    else
      step "c-$case-result" 60 python3 "$check" train "$logs/c-$case.log" --min-accuracy 0.5 --stats "$dir"
    fi
  done
}

# JAX (issue 31): psum over the 4 ranks through the forwarding shim, with
# libgradcomp.so preloaded; exact with GRADCOMP_ALGO=off, close with qsgd 8 bit.
part_e() {
  local real="<nvidia.nccl's lib/libnccl.so.2>" mode
  [ $dry = 1 ] || real="$(python3 -c 'import nvidia.nccl, os
print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)"
  for mode in exact compressed; do
    local name="e-jax-$mode" dir port=$((29611 + ${#mode})) args=(--inputs integer) check_args=(--expect exact)
    local algo=(GRADCOMP_ALGO=off)
    dir="$(outdir "$name")"
    if [ $mode = compressed ]; then
      algo=(GRADCOMP_ALGO=qsgd GRADCOMP_BITS=8) args=(--inputs normal)
      check_args=(--expect close --rtol 0.1 --min-compressed 1)
    fi
    step "$name" 120 env LD_LIBRARY_PATH="$shim:${LD_LIBRARY_PATH:-}" GRADCOMP_NCCL_LIBRARY="$real" LD_PRELOAD="$lib" \
      "${algo[@]}" GRADCOMP_MIN_BYTES=64K GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO \
      "${torchrun[@]}" "$jax_script" --coordinator "127.0.0.1:$port" "${args[@]}" --out "$dir" --label "jax-$mode"
    step "$name-result" 30 python3 "$check" jax "$dir" "${check_args[@]}" --stats "$dir"
  done
}

# b2's oktopk with the GPU image's own UCX (issue 31): its libraries first on
# LD_LIBRARY_PATH and UCX_MODULE_DIR unset (the carried packages still supply
# hwloc, FFTW and OpenBLAS where the image lacks them).
part_f() {
  local sys="/lib/$arch" name dir mode
  step f-sysucx-present 10 bash -c "ls -l $sys/libucp.so.0 && { ls $sys/ucx | grep cuda || echo 'no CUDA modules in $sys/ucx'; }"
  for mode in safe asis; do
    name="f-sysucx-$mode" dir="$(outdir "f-sysucx-$mode")"
    local phases=(--phases record,time --record "$work/record-f") limit=90
    [ $mode = safe ] || phases=(--phases time) limit=60  # the control: does UCX's own default crash?
    step "$name" $limit env -u UCX_MODULE_DIR LD_LIBRARY_PATH="$sys:${LD_LIBRARY_PATH:-}" GRADCOMP_UCX_CUDA=$mode \
      LD_PRELOAD="$lib" GRADCOMP_ALGO=oktopk GRADCOMP_DENSITY=0.01 GRADCOMP_MIN_BYTES=64K GRADCOMP_STATS="$dir/stats" \
      GRADCOMP_DEBUG=INFO "${torchrun[@]}" "$driver" "${phases[@]}" --out "$dir" --label "sysucx-$mode" --time-sizes 4M
    [ $mode = safe ] || continue
    step "$name-loaded" 10 bash -c "grep -m1 'transport context created (UCX ' '$logs/$name.log' | grep -v 'UCX 1.13'"
    step "$name-defaults" 10 grep -m1 "has CUDA modules" "$logs/$name.log"
    step "$name-reference" 90 "$refcheck" "$work/record-f"
    step "$name-compressed" 60 python3 "$check" stats "$dir"
  done
}

# FSDP2 (issue 34): the sharded example's reduce-scatters through gradcomp,
# dense (gradcomp's own reduce-scatter) and qsgd 4 bit, with allreduce off
# (FSDP2 makes none): the same seed and 150 steps each, so the accuracies
# compare. Units below 64K of input (conv1, conv2, fc2) pass through, which
# the verdict lists; fc1 (1.6 MB) is compressed every step. Then dense
# reduce-scatters with blockq int8 parameter allgathers (issue 42: the CUDA
# blockq kernels; FSDP2 all-gathers fc1's fp32 shards before its forward and
# its backward): --allgather requires compressed allgathers on every rank.
part_g() {
  local case
  for case in dense qsgd blockq; do
    local name="g-fsdp-$case" dir base=() rs="$case" ag=()
    [ $case = blockq ] && rs=dense ag=(--allgather)
    dir="$(outdir "$name")"
    # shellcheck disable=SC2046
    step "$name" 90 env LD_PRELOAD="$lib" GRADCOMP_ALGO=off GRADCOMP_RS_ALGO="$rs" $(params "$case") \
      GRADCOMP_MIN_BYTES=64K GRADCOMP_STATS="$dir/stats" GRADCOMP_DEBUG=INFO \
      "${torchrun[@]}" "$fsdp_example" --data "$data" --epochs 1 --max-steps "$fsdp_steps"
    [ $case = dense ] || base=(--dense "$logs/g-fsdp-dense.log" --band 0.05)
    step "$name-result" 30 python3 "$check" fsdp "$logs/$name.log" --stats "$dir" --min-accuracy 0.5 \
      "${base[@]}" "${ag[@]}"
  done
}

# By value: the kernels and executor, compressed calls, the side-by-side
# timings and training, the image's own UCX, JAX, then the pass-through, the
# net plugin and CollNet (proven on the H200 already), then FSDP2.
run_parts() {
  has a && part_a
  has b2 && part_b2
  has c && part_c
  has f && part_f
  has e && part_e
  has b1 && part_b1
  has b3 && part_b3
  has d && part_d
  has g && part_g
}

if [ $dry = 1 ]; then
  echo "== checks"
  dry_checks
  checks=$?
  plan=/dev/null
  [ -n "$out" ] && plan="$out/plan.txt"
  out="${out:-\$OUT}"
  {
    echo "== plan: parts $plist$([ $quick = 1 ] && echo ' (quick)') on the GPU machine (OUTDIR $out)"
    echo "  environment: ${sysroot#$root/} first on PATH, LD_LIBRARY_PATH, PKG_CONFIG_LIBDIR; NCCL_MNNVL_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 GLOO_SOCKET_IFNAME=lo GRADCOMP_NET_IFNAME=lo"
    if [ $build_there = 0 ] && [ -f "$prebuilt" ]; then
      echo "  setup: unpack .device/debs into ${sysroot#$root/} (when newer), unpack .device/prebuilt.tar.xz into ${build#$root/}"
    else
      echo "  setup: unpack .device/debs into ${sysroot#$root/} (when newer), configure (CUDA for the local GPU) and build $(rel "$build_targets") in ${build#$root/}"
    fi
    run_parts
    echo "== step limits: $plan_limits s in all, --budget $budget s (steps the budget cannot hold are cut or not run, and say so)"
    echo "== run with the device tool (carry: ${carry[*]}):"
    sed -n '/^#      run(/p' "${BASH_SOURCE[0]}" | sed 's/^# */  /'
  } | tee "$plan"
  [ $checks = 0 ] && echo "dry run: every check passed" || echo "dry run: FAILED checks (above)"
  exit $checks
fi

rm -rf "$logs" && mkdir -p "$logs"
: >"$out/summary.txt"
summary "gpu_batch.sh parts $plist$([ $quick = 1 ] && echo ' (quick)') at $(date -u +%FT%TZ), budget $budget s"
sysroot_env "$sysroot"
export PYTHONUNBUFFERED=1  # complete logs even from a step that is killed
setup || { summary "setup failed: parts not run"; pack; exit 1; }
run_parts
summary "gpu_batch.sh: $(grep -c '^PASS' "$out/summary.txt") passed, $(grep -c '^FAIL' "$out/summary.txt") failed in $SECONDS s"
pack
exit $failed

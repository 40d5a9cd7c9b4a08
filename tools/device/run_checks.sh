#!/usr/bin/env bash
# Run on the GPU machine, from the repository root: unpacks .device/debs into
# .device/root (never into /), configures and builds with CUDA for the local
# GPU's architecture plus sm_90, runs every [gpu] test, the executor protocol
# tests and gradcomp-kbench, and writes every log into OUTDIR.
#   tools/device/run_checks.sh OUTDIR
set -uo pipefail
out="${1:?usage: run_checks.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
sysroot="$root/.device/root"
build="$root/.device/build"
log() { echo "== $*" | tee -a "$out/summary.txt"; }

mkdir -p "$sysroot"
for deb in "$root"/.device/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
arch=x86_64-linux-gnu
export PATH="$sysroot/usr/bin:/usr/local/cuda/bin:$PATH"
export PKG_CONFIG_SYSROOT_DIR="$sysroot"
export PKG_CONFIG_PATH="$sysroot/usr/lib/$arch/pkgconfig:$sysroot/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$sysroot/usr/lib/$arch:$sysroot/usr/lib/$arch/openblas-pthread:${LD_LIBRARY_PATH:-}"
export UCX_MODULE_DIR="$sysroot/usr/lib/$arch/ucx"

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1
  git -C "$root" log -1 --format='commit %H' 2>/dev/null
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
log "configure (CUDA architectures 90;${cc:-90})"
cmake -G Ninja -S "$root" -B "$build" -DGRADCOMP_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=90;${cc:-90}" \
  -DCMAKE_PREFIX_PATH="$sysroot/usr" > "$out/configure.log" 2>&1 || { log "configure FAILED"; exit 1; }
log "build"
( time cmake --build "$build" -j "$(nproc)" ) > "$out/build.log" 2>&1 || { log "build FAILED"; exit 1; }

rc=0
for t in test_gpu_backend test_gpu_kernels test_gpu_quant_kernels test_gpu_algorithms test_gpu_executor test_executor_protocol test_backend_memory; do
  log "$t"
  "$build/tests/$t" -r console -d yes > "$out/$t.log" 2>&1
  r=$?; echo "exit $r" >> "$out/$t.log"; log "$t exit $r"; [ $r -eq 0 ] || rc=1
done
log "gradcomp-kbench"
"$build/tools/gradcomp-kbench/gradcomp-kbench" -J "$out/kbench.json" > "$out/kbench.log" 2>&1
r=$?; log "gradcomp-kbench exit $r"; [ $r -eq 0 ] || rc=1
exit $rc

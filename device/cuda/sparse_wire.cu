// COO and dense message bodies of the sparse wire format on the GPU (CPU
// reference: device/cpu/sparse_wire.cc). One thread per entry; decoders check
// everything they read and report the first bad entry (by position, then in
// the CPU's order of checks for one entry). A dense body is built in device
// memory and copied to a host payload in one transfer; a dense body in host
// memory is copied in once before its two passes.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

// Encoder input: strictly ascending, inside [base, base + count), not +0.0.
__device__ inline bool encodable(const uint64_t* idx, const float* val, size_t i, uint64_t base,
                                 uint64_t count) {
  return idx[i] >= base && idx[i] - base < count && !isPlusZero(val[i]) &&
         (i == 0 || idx[i] > idx[i - 1]);
}

Status encodeFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::Internal,
                    "%s: entry %llu (index %llu) is +0.0, outside [%llu, %llu) or out of order",
                    op.name, keyPos(f.key), f.a, op.p[0], op.p[0] + op.p[1]);
}

__global__ void cooEncodeKernel(Ctl ctl, const uint64_t* idx, const float* val, size_t nnz,
                                uint64_t base, uint64_t count, int ib, uint8_t* out) {
  if (skipBlock(ctl)) return;
  const bool aligned = uintptr_t(out) % 8 == 0;
  uint8_t* values = out + nnz * size_t(ib);
  GC_GRID_STRIDE(i, nnz) {
    if (!encodable(idx, val, i, base, count)) fail(ctl, keyAt(i), idx[i]);
    const uint64_t off = idx[i] - base;
    if (aligned && ib == 8) reinterpret_cast<uint64_t*>(out)[i] = off;
    else if (aligned && ib == 4) reinterpret_cast<uint32_t*>(out)[i] = uint32_t(off);
    else putUint(out + i * size_t(ib), off, ib);
    if (aligned) reinterpret_cast<float*>(values)[i] = val[i];
    else putFloat(values + 4 * i, val[i]);
  }
}

// Per entry, in the CPU's order: offset in range, ascending, not +0.0.
__global__ void cooDecodeKernel(Ctl ctl, const uint8_t* in, size_t nnz, uint64_t base,
                                uint64_t count, int ib, uint64_t* idx, float* val) {
  if (skipBlock(ctl)) return;
  const uint8_t* values = in + nnz * size_t(ib);
  GC_GRID_STRIDE(i, nnz) {
    const uint64_t off = getUint(in + i * size_t(ib), ib);
    const float v = getFloat(values + 4 * i);
    if (off >= count) fail(ctl, keyAt(i, 0), off);
    else if (i > 0 && !(base + off > base + getUint(in + (i - 1) * size_t(ib), ib)))
      fail(ctl, keyAt(i, 1));
    else if (isPlusZero(v)) fail(ctl, keyAt(i, 2));
    idx[i] = base + off;
    val[i] = v;
  }
}

Status cooDecodeFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  const unsigned long long i = keyPos(f.key);
  switch (keyKindOf(f.key)) {
    case 0:
      return makeStatus(Err::RemoteError,
                        "sparse message%s: COO entry %llu has offset %llu outside a region of %llu",
                        from.c_str(), i, f.a, op.p[0]);
    case 1:
      return makeStatus(Err::RemoteError,
                        "sparse message%s: COO offsets not strictly ascending at entry %llu",
                        from.c_str(), i);
    default:
      return makeStatus(Err::RemoteError, "sparse message%s: COO entry %llu carries +0.0",
                        from.c_str(), i);
  }
}

__global__ void denseScatterKernel(Ctl ctl, const uint64_t* idx, const float* val, size_t nnz,
                                   uint64_t base, uint64_t count, float* body) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, nnz) {
    if (!encodable(idx, val, i, base, count)) {
      fail(ctl, keyAt(i), idx[i]);
      continue;  // never write outside the body
    }
    body[idx[i] - base] = val[i];
  }
}

// (value is not +0.0, 0) per element of a dense body (device memory, aligned).
struct NonZero {
  const float* body;
  __device__ Pair operator()(size_t i, const Ctl&) const {
    return {isPlusZero(body[i]) ? 0ull : 1ull, 0};
  }
};
struct DenseTotal {
  size_t nnz;
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    if (all.a != nnz) fail(ctl, all.a > nnz ? 0 : 1, all.a);
  }
};
struct DenseWrite {
  const float* body;
  uint64_t base;
  uint64_t* idx;
  float* val;
  __device__ void operator()(size_t i, Pair before, Pair mine, const Ctl&) const {
    if (!mine.a) return;
    idx[before.a] = base + i;
    val[before.a] = body[i];
  }
};

Status denseDecodeFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (f.key == 0)
    return makeStatus(Err::RemoteError,
                      "sparse message%s: dense body holds more than the %llu non-zeros its "
                      "header announces",
                      from.c_str(), op.p[0]);
  return makeStatus(Err::RemoteError,
                    "sparse message%s: dense body holds %llu non-zeros, header says %llu",
                    from.c_str(), f.a, op.p[0]);
}

Status checkIndexBytes(const char* what, int indexBytes) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8, Err::InvalidArgument,
             "%s: indexBytes = %d (accepted: 4, 8)", what, indexBytes);
  return Status::Ok();
}

}  // namespace

Status CudaBackend::cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                              uint64_t count, int indexBytes, void* out) {
  Prim p(state(), "cooEncode");
  GC_CHECK(checkIndexBytes("cooEncode", indexBytes));
  if (nnz == 0) return Status::Ok();
  p.reads(idx, nnz * 8);
  p.reads(val, nnz * 4);
  p.writes(out, nnz * (size_t(indexBytes) + 4));
  p.onFailure(-1, &encodeFailure, base, count);
  cooEncodeKernel<<<blocksFor(nnz), kThreads, 0, p.stream()>>>(
      p.ctl(), idx, val, nnz, base, count, indexBytes, static_cast<uint8_t*>(out));
  return p.launched();
}

Status CudaBackend::cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count,
                              int indexBytes, uint64_t* idx, float* val, int source) {
  Prim p(state(), "cooDecode");
  GC_CHECK(checkIndexBytes("cooDecode", indexBytes));
  if (nnz == 0) return Status::Ok();
  const size_t bytes = nnz * (size_t(indexBytes) + 4);
  p.reads(in, bytes);
  p.writes(idx, nnz * 8);
  p.writes(val, nnz * 4);
  // Each offset is read twice (its entry and the next one's order check).
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(in, bytes), &ws));
  Carve carve(ws);
  const uint8_t* body = static_cast<const uint8_t*>(in);
  GC_CHECK(p.stage(body, bytes, carve, &body));
  p.onFailure(source, &cooDecodeFailure, count);
  cooDecodeKernel<<<blocksFor(nnz), kThreads, 0, p.stream()>>>(p.ctl(), body, nnz, base, count,
                                                               indexBytes, idx, val);
  return p.launched();
}

Status CudaBackend::denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                                uint64_t count, void* out) {
  Prim p(state(), "denseEncode");
  if (count == 0 && nnz == 0) return Status::Ok();
  const size_t bytes = size_t(count) * 4;
  // Built in device memory (zeros, then the entries), then one copy when the
  // payload is host memory or not float-aligned.
  const bool direct = !p.isHost(out, bytes) && uintptr_t(out) % 4 == 0;
  float* body = static_cast<float*>(out);
  if (!direct) {
    void* ws = nullptr;
    GC_CHECK(p.scratch(bytes, &ws));
    body = static_cast<float*>(ws);
  }
  p.reads(idx, nnz * 8);
  p.reads(val, nnz * 4);
  p.writes(out, bytes);
  p.onFailure(-1, &encodeFailure, base, count);
  if (bytes) GC_CHECK(p.check(cudaMemsetAsync(body, 0, bytes, p.stream()), "cudaMemsetAsync"));
  if (nnz)
    denseScatterKernel<<<blocksFor(nnz), kThreads, 0, p.stream()>>>(p.ctl(), idx, val, nnz, base,
                                                                    count, body);
  GC_CHECK(p.launched());
  if (!direct && bytes)
    GC_CHECK(p.check(cudaMemcpyAsync(out, body, bytes, cudaMemcpyDefault, p.stream()),
                     "cudaMemcpyAsync"));
  return Status::Ok();
}

Status CudaBackend::denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz,
                                uint64_t* idx, float* val, int source) {
  Prim p(state(), "denseDecode");
  const size_t bytes = size_t(count) * 4;
  const bool direct = !p.isHost(in, bytes) && uintptr_t(in) % 4 == 0;
  void* ws = nullptr;
  GC_CHECK(p.scratch((direct ? 0 : Carve::bytes<float>(count)) + TileScratch::bytes(count), &ws));
  Carve carve(ws);
  const float* body = static_cast<const float*>(in);
  if (!direct) {
    float* copy = carve.take<float>(count);
    if (bytes)
      GC_CHECK(p.check(cudaMemcpyAsync(copy, in, bytes, cudaMemcpyDefault, p.stream()),
                       "cudaMemcpyAsync"));
    body = copy;
  }
  const TileScratch ts = TileScratch::take(carve, count);
  p.reads(in, bytes);
  p.writes(idx, nnz * 8);
  p.writes(val, nnz * 4);
  p.onFailure(source, &denseDecodeFailure, nnz);
  launchTileScan(p, ts, count, NonZero{body}, DenseTotal{nnz}, DenseWrite{body, base, idx, val});
  return p.launched();
}

}  // namespace gradcomp::device

// PrivateBuffers: see private_buffers.h.
#include "device/cuda/private_buffers.h"

#include <cuda_runtime.h>

#include "device/cuda/cuda_backend.h"

namespace gradcomp::device {
namespace {

Status cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return makeStatus(Err::SystemError, "private device buffers: %s failed: %s", what,
                    cudaGetErrorString(e));
}

}  // namespace

Status PrivateBuffers::create(int device, size_t sendBytes, size_t recvBytes,
                              std::unique_ptr<PrivateBuffers>* out) {
  CurrentDevice current(device);
  GC_CHECK(current.status());
  std::unique_ptr<PrivateBuffers> b(new PrivateBuffers());
  b->device_ = device;
  cudaStream_t stream = nullptr;
  GC_CHECK(cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  b->stream_ = stream;
  GC_CHECK(cudaOk(cudaMallocAsync(&b->send_, sendBytes ? sendBytes : 1, stream),
                  "cudaMallocAsync of the send buffer"));
  b->sendBytes_ = sendBytes;
  GC_CHECK(cudaOk(cudaMallocAsync(&b->recv_, recvBytes ? recvBytes : 1, stream),
                  "cudaMallocAsync of the receive buffer"));
  b->recvBytes_ = recvBytes;
  GC_CHECK(cudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize after allocation"));
  *out = std::move(b);
  return Status::Ok();
}

PrivateBuffers::~PrivateBuffers() {
  if (stream_ == nullptr) return;
  CurrentDevice current(device_);
  if (send_) (void)cudaFreeAsync(send_, stream_);
  if (recv_) (void)cudaFreeAsync(recv_, stream_);
  (void)cudaStreamSynchronize(stream_);
  (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

// One copy on the private stream, complete on return.
Status PrivateBuffers::copy(void* dst, const void* src, size_t bytes, size_t limit, bool toDevice) {
  GC_REQUIRE(bytes <= limit, Err::InvalidArgument, "private device buffers: %s of %zu bytes, %zu available",
             toDevice ? "upload" : "download", bytes, limit);
  CurrentDevice current(device_);
  GC_CHECK(current.status());
  GC_CHECK(cudaOk(cudaMemcpyAsync(dst, src, bytes,
                                  toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream_),
                  toDevice ? "cudaMemcpyAsync host to device" : "cudaMemcpyAsync device to host"));
  return cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after a copy");
}

Status PrivateBuffers::upload(const void* host, size_t bytes) {
  return copy(send_, host, bytes, sendBytes_, true);
}

Status PrivateBuffers::download(void* host, size_t bytes) {
  return copy(host, recv_, bytes, recvBytes_, false);
}

}  // namespace gradcomp::device

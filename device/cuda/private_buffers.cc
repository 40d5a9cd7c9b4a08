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

Status PrivateBuffers::upload(const void* host, size_t bytes) {
  GC_REQUIRE(bytes <= sendBytes_, Err::InvalidArgument,
             "private device buffers: upload of %zu bytes into %zu", bytes, sendBytes_);
  CurrentDevice current(device_);
  GC_CHECK(current.status());
  GC_CHECK(cudaOk(cudaMemcpyAsync(send_, host, bytes, cudaMemcpyHostToDevice, stream_),
                  "cudaMemcpyAsync host to device"));
  return cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after the upload");
}

Status PrivateBuffers::download(void* host, size_t bytes) {
  GC_REQUIRE(bytes <= recvBytes_, Err::InvalidArgument,
             "private device buffers: download of %zu bytes from %zu", bytes, recvBytes_);
  CurrentDevice current(device_);
  GC_CHECK(current.status());
  GC_CHECK(cudaOk(cudaMemcpyAsync(host, recv_, bytes, cudaMemcpyDeviceToHost, stream_),
                  "cudaMemcpyAsync device to host"));
  return cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after the download");
}

}  // namespace gradcomp::device

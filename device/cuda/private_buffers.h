// Device memory and a stream of gradcomp's own, for calls that must not touch
// an application's buffers or streams: the self-test's (plugin/nccl/selftest.h).
//
// Contract (the proxy rule, device/cuda/cuda_backend.h): create(), upload(),
// download() and the destructor make driver calls that may take the driver's
// locks, so the caller makes them only while no stream of this buffer's calls
// is parked on gradcomp: before it submits a call on stream(), and after the
// executor said that call is done. Everything is stream-ordered on the
// private non-blocking stream (cudaMallocAsync, cudaMemcpyAsync,
// cudaFreeAsync): nothing here waits for the legacy stream, another stream of
// the application's, or the device as a whole (cudaMalloc/cudaFree may), so a
// stream another communicator parked meanwhile is never waited for.
// Host headers compile with g++: no CUDA header here.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"

struct CUstream_st;  // cudaStream_t

namespace gradcomp::device {

class PrivateBuffers {
 public:
  // sendBytes and recvBytes of device memory on CUDA device `device`, and a
  // non-blocking stream there.
  static Status create(int device, size_t sendBytes, size_t recvBytes,
                       std::unique_ptr<PrivateBuffers>* out);
  ~PrivateBuffers();  // frees on the stream, waits for it, destroys it
  PrivateBuffers(const PrivateBuffers&) = delete;
  PrivateBuffers& operator=(const PrivateBuffers&) = delete;

  void* send() const { return send_; }
  void* recv() const { return recv_; }
  CUstream_st* stream() const { return stream_; }
  int device() const { return device_; }

  // Host -> send(), complete on return.
  Status upload(const void* host, size_t bytes);
  // recv() -> host once the stream's work is complete (the caller saw the
  // call done, so the stream is not parked), complete on return.
  Status download(void* host, size_t bytes);

 private:
  PrivateBuffers() = default;
  Status copy(void* dst, const void* src, size_t bytes, size_t limit, bool toDevice);
  int device_ = -1;
  size_t sendBytes_ = 0, recvBytes_ = 0;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  CUstream_st* stream_ = nullptr;
};

}  // namespace gradcomp::device

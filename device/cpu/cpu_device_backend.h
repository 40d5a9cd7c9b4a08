// The CPU reference with a GPU's memory discipline ("cpu-device"): the
// backend CI uses to prove, without a GPU, that an algorithm keeps the
// contract of device/backend.h the CUDA backend relies on.
//
// - Device memory comes from one arena that is mprotect'ed PROT_NONE except
//   while this backend's primitives run: host code that reads or writes it
//   (an O(n) loop on the host, a std::vector copy, a transport sending from
//   it) faults, and the fault handler names the address and the backend.
// - Primitives are deferred: recorded in order and executed by sync(), like
//   kernels on a stream. Scalar results are poisoned (NaN, all ones) until
//   then, host memory a primitive writes changes only then, and host memory a
//   primitive reads is read then: an algorithm that reads a result, sends a
//   payload or reuses a buffer before syncing gets wrong data and fails its
//   checks.
// - Every array argument must lie inside memory this backend allocated
//   (device or host space, with the primitive's full extent): anything else
//   is an error naming the primitive and the argument, as a kernel handed an
//   unregistered host pointer would be an illegal access.
// - Traffic: bytes of host memory primitives read (h2d) and write (d2h), the
//   scalar results read back (d2h), and syncs that had work.
//
// Thread-safe (WAGMA's progress thread shares a backend with its caller):
// one thread's sync runs everything recorded so far, as a shared stream
// would. The CUDA backend's lock rule holds here too: sync() runs its batch
// (the device's work) without the backend's lock, so reserve(), allocation
// and recording on other threads never wait for it; syncs run one at a time.
#pragma once

#include <functional>
#include <memory>

#include "device/backend.h"

namespace gradcomp::device {

// A fresh cpu-device backend with its own arena (one per rank or per
// communicator; tests running ranks as threads give each rank its own).
std::unique_ptr<Backend> makeCpuDeviceBackend();

// Tests: records `op` as a primitive of `dev` (a cpu-device backend): its
// next sync() runs it in order with the others, as a kernel that takes as long
// as `op` does. False when `dev` is not a cpu-device backend.
bool recordCpuDevicePrimitiveForTest(Backend& dev, const char* name, std::function<Status()> op);

}  // namespace gradcomp::device

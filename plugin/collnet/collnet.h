// The version-neutral CollNet plugin; collnet_adapters.cc maps
// ncclCollNet_v6 .. v12 onto it.
//
// NCCL's CollNet hands a network plugin the inter-node reduction: on each
// node the head rank (one per node and channel group) calls iallreduce on
// data NCCL already summed inside the node, in chunks of 32-512 KiB from its
// host staging buffers, and reads the result from the receive buffer. Here
// every chunk runs the configured gradcomp algorithm among the head ranks
// over UCX (coll_comm.h), so the reduction across nodes is compressed.
//
// Connection: listen() opens a UCX listener on the device's address (port
// from the kernel) and writes a handle: magic, that address, and a hash of
// this rank's configuration. NCCL exchanges the handles among the head ranks;
// connect(handles, nranks, rank) is collective: rank 0's listener is the
// rendezvous, the others connect to it, worker addresses are exchanged and
// the UCX transport is wired. Every rank reaches the same verdict: a
// configuration that differs across head ranks (hashes in the handles, then
// the texts to name the key) or a wiring failure on any rank fails connect
// on all of them (NCCL then runs without CollNet).
//
// Only host memory: getProperties says NCCL_PTR_HOST, regMr accepts
// NCCL_PTR_HOST only, so NCCL stages device data through host buffers.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "plugin/net/ucx_net.h"

namespace gradcomp::collnet {

// Reference-counted like the net plugin (NCCL >= 2.28 calls init per
// communicator). Fails only with GRADCOMP_STRICT=1 and a rejected
// configuration.
Status init();
void finalize();
// Whether init() has run in this process with CollNet offered (the tuner
// steers NCCL only then).
bool offered();

Status deviceCount(int* n);  // 0 when not offered: NCCL disables CollNet
Status properties(int dev, net::Properties* out);
Status reduceSupport(int ncclDtype, int ncclOp, int* supported);

Status listen(int dev, void* handle, void** listenComm);
Status connect(void* const* handles, int nranks, int rank, void* listenComm, void** collComm);
Status regMr(void* collComm, void* data, size_t size, int type, void** mhandle);
Status deregMr(void* collComm, void* mhandle);
// *request null: busy, NCCL calls again.
Status iallreduce(void* collComm, void* sendData, void* recvData, size_t count, int ncclDtype,
                  int ncclOp, void* sendMhandle, void* recvMhandle, void** request);
Status test(void* request, int* done, int* size);
Status closeColl(void* collComm);
Status closeListen(void* listenComm);

}  // namespace gradcomp::collnet

// The version-neutral net plugin over UCX tag matching (one ucp worker per
// process, every call serialized by one mutex: NCCL drives the plugin from
// its proxy threads). net_adapters.cc maps ncclNet_v10/v11 onto this.
//
// Connection model: listen() creates a UCX listener bound to the device's
// address and assigns the future connection a 32-bit tag unique in this
// process; the NCCL handle (<= 128 bytes) carries that socket address and
// tag. connect() creates a client endpoint to it (non-blocking); accept()
// returns NULL until the connection request has arrived. Data messages use the
// UCX tag (connection tag << 32 | NCCL tag), so a receive matches exactly one
// connection and one NCCL tag; messages with equal tags match in order.
//
// Errors: a peer that dies or closes its endpoint fails every pending and
// later request on that connection with an error naming the peer address
// (never a hang); test() reports completed requests first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace gradcomp::net {

struct Properties {
  std::string name, pciPath;
  uint64_t guid = 0;
  int ptrSupport = 0;  // NCCL_PTR_* bits
  int speedMbps = 0;
  int maxComms = 0;
  int maxRecvs = 0;
};

constexpr int kMaxRecvs = 8;

// NCCL's opaque connection handle (NCCL_NET_HANDLE_MAXSIZE bytes a peer sent
// through NCCL's bootstrap), checked as connect() checks it: InvalidArgument
// unless it has gradcomp's magic, an IPv4 address and a non-zero port.
// *connTag and *peer ("a.b.c.d:port") describe the connection it names.
Status decodeHandle(const void* handle, uint32_t* connTag, std::string* peer);

// Reference-counted: every init needs one finalize.
Status init();
void finalize();
Status deviceCount(int* n);
Status properties(int dev, Properties* out);

Status listen(int dev, void* handle, void** listenComm);
Status connect(int dev, const void* handle, void** sendComm);  // *sendComm may be null: retry
Status accept(void* listenComm, void** recvComm);             // *recvComm may be null: retry
Status regMr(void* comm, void* data, size_t size, int type, void** mhandle);
Status deregMr(void* comm, void* mhandle);
Status isend(void* sendComm, void* data, size_t size, int tag, void** request);
Status irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
             void** request);
Status test(void* request, int* done, int* sizes);
Status closeSend(void* sendComm);
Status closeRecv(void* recvComm);
Status closeListen(void* listenComm);

}  // namespace gradcomp::net

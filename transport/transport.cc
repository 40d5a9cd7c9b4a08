#include "transport/transport.h"

namespace gradcomp::transport {

Status Transport::sendRecv(int dst, const void* sendBuf, size_t sendBytes, int src, void* recvBuf,
                           size_t recvCapacity, uint64_t tag, size_t* recvBytes) {
  Handle h[2] = {0, 0};
  GC_CHECK(irecv(src, tag, recvBuf, recvCapacity, &h[0]));
  Status s = isend(dst, tag, sendBuf, sendBytes, &h[1]);
  if (!s.ok()) {
    cancel(h[0]);
    return s;
  }
  size_t bytes[2] = {0, 0};
  GC_CHECK(waitAll(h, 2, bytes));
  if (recvBytes) *recvBytes = bytes[0];
  return Status::Ok();
}

PeerCounters Transport::totalCounters() const {
  PeerCounters total;
  for (int p = 0; p < size(); ++p) {
    PeerCounters c = counters(p);
    total.bytesSent += c.bytesSent;
    total.bytesRecv += c.bytesRecv;
    total.msgsSent += c.msgsSent;
    total.msgsRecv += c.msgsRecv;
  }
  return total;
}

}  // namespace gradcomp::transport

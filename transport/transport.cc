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

Status Transport::barrier(uint64_t tag) {
  const int me = rank(), n = size();
  if (n == 1) return Status::Ok();
  char token = 0;
  if (me != 0) return sendRecv(0, &token, 0, 0, &token, 0, tag);
  std::vector<Handle> handles;
  auto postAll = [&](bool send) -> Status {
    handles.clear();
    for (int p = 1; p < n; ++p) {
      Handle h = 0;
      Status s = send ? isend(p, tag, &token, 0, &h) : irecv(p, tag, &token, 0, &h);
      if (!s.ok()) {
        for (Handle posted : handles) cancel(posted);
        return s;
      }
      handles.push_back(h);
    }
    return waitAll(handles.data(), handles.size(), nullptr);
  };
  GC_CHECK(postAll(false));  // everyone arrived
  return postAll(true);      // release them
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

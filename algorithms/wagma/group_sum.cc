#include "algorithms/wagma/group_sum.h"

#include "algorithms/shared/requests.h"

namespace gradcomp::algo::wagma {
namespace {

Status exchange(transport::Transport& net, int peer, const void* out, void* in, size_t bytes,
                uint64_t tag, const char* what) {
  size_t got = 0;
  GC_CHECK(net.sendRecv(peer, out, bytes, peer, in, bytes, tag, &got));
  GC_REQUIRE(got == bytes, Err::RemoteError,
             "wagma %s: peer %d sent %zu bytes, expected %zu (ranks disagree on the buffer "
             "size?)",
             what, peer, got, bytes);
  return Status::Ok();
}

Status recvExact(transport::Transport& net, int peer, void* in, size_t bytes, uint64_t tag,
                 const char* what) {
  shared::RequestSet req(net, what);
  GC_CHECK(req.irecv(peer, tag, in, bytes));
  return req.waitAll();  // the length is checked against `bytes`
}

Status sendAll(transport::Transport& net, int peer, const void* out, size_t bytes,
               uint64_t tag) {
  shared::RequestSet req(net, "wagma group sum");
  GC_CHECK(req.isend(peer, tag, out, bytes));
  return req.waitAll();
}

}  // namespace

Status groupSum(transport::Transport& net, device::Backend& dev, const Topology& topo,
                uint64_t call, const std::function<uint64_t(uint64_t step)>& tagOf, void* buf,
                size_t count, DataType t, dense::Staging* stage) {
  const int rank = net.rank();
  const size_t bytes = count * dtypeSize(t);
  const int fold = foldPartner(topo, rank);
  stage->bind(dev);
  if (stage->send.size() < bytes) stage->send.resize(bytes);
  if (stage->recv.size() < bytes) stage->recv.resize(bytes);
  char* out = stage->send.data();
  char* in = stage->recv.data();
  auto stageOut = [&]() -> Status {  // buf as the primitives so far leave it
    GC_CHECK(dev.copy(out, buf, bytes));
    return dev.sync();
  };
  if (rank >= topo.core) {  // extra rank: the core partner does the work
    GC_CHECK(stageOut());
    GC_CHECK(sendAll(net, fold, out, bytes, tagOf(kStepFoldIn)));
    GC_CHECK(recvExact(net, fold, in, bytes, tagOf(kStepFoldOut), "wagma fold result"));
    GC_CHECK(dev.copy(buf, in, bytes));
    return dev.sync();
  }
  if (fold >= 0) {
    GC_CHECK(recvExact(net, fold, in, bytes, tagOf(kStepFoldIn), "wagma fold input"));
    GC_CHECK(dev.add(buf, buf, in, count, t));
  }
  const std::vector<int> bits = groupBits(topo, call);
  for (size_t j = 0; j < bits.size(); ++j) {
    const int partner = rank ^ (1 << bits[j]);
    GC_CHECK(stageOut());  // also completes the add that read `in`
    GC_CHECK(exchange(net, partner, out, in, bytes, tagOf(kStepPhase0 + j), "butterfly"));
    GC_CHECK(dev.add(buf, buf, in, count, t));
  }
  if (fold >= 0) {
    GC_CHECK(stageOut());
    GC_CHECK(sendAll(net, fold, out, bytes, tagOf(kStepFoldOut)));
  }
  return dev.sync();
}

}  // namespace gradcomp::algo::wagma

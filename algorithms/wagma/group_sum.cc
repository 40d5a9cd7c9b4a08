#include "algorithms/wagma/group_sum.h"

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
  transport::Handle h = 0;
  GC_CHECK(net.irecv(peer, tag, in, bytes, &h));
  size_t got = 0;
  GC_CHECK(net.wait(h, &got));
  GC_REQUIRE(got == bytes, Err::RemoteError,
             "wagma %s: peer %d sent %zu bytes, expected %zu (ranks disagree on the buffer "
             "size?)",
             what, peer, got, bytes);
  return Status::Ok();
}

Status sendAll(transport::Transport& net, int peer, const void* out, size_t bytes,
               uint64_t tag) {
  transport::Handle h = 0;
  GC_CHECK(net.isend(peer, tag, out, bytes, &h));
  GC_CHECK(net.wait(h));
  return Status::Ok();
}

}  // namespace

Status groupSum(transport::Transport& net, device::Backend& dev, const Topology& topo,
                uint64_t call, const std::function<uint64_t(uint64_t step)>& tagOf, void* buf,
                size_t count, DataType t, device::Buffer<char>* scratch) {
  const int rank = net.rank();
  const size_t bytes = count * dtypeSize(t);
  const int fold = foldPartner(topo, rank);
  if (rank >= topo.core) {  // extra rank: the core partner does the work
    GC_CHECK(sendAll(net, fold, buf, bytes, tagOf(kStepFoldIn)));
    GC_CHECK(recvExact(net, fold, buf, bytes, tagOf(kStepFoldOut), "fold result"));
    return Status::Ok();
  }
  device::bound(*scratch, dev);
  if (scratch->size() < bytes) scratch->resize(bytes);
  if (fold >= 0) {
    GC_CHECK(recvExact(net, fold, scratch->data(), bytes, tagOf(kStepFoldIn), "fold input"));
    GC_CHECK(dev.add(buf, buf, scratch->data(), count, t));
  }
  const std::vector<int> bits = groupBits(topo, call);
  for (size_t j = 0; j < bits.size(); ++j) {
    const int partner = rank ^ (1 << bits[j]);
    GC_CHECK(exchange(net, partner, buf, scratch->data(), bytes, tagOf(kStepPhase0 + j),
                      "butterfly"));
    GC_CHECK(dev.add(buf, buf, scratch->data(), count, t));
  }
  if (fold >= 0) GC_CHECK(sendAll(net, fold, buf, bytes, tagOf(kStepFoldOut)));
  return Status::Ok();
}

}  // namespace gradcomp::algo::wagma

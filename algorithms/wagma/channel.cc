#include "algorithms/wagma/channel.h"

#include <cstring>

#include "algorithms/shared/requests.h"
#include "transport/ucx_transport.h"

namespace gradcomp::algo::wagma {
namespace {

// Blob allgather over an existing transport: length, then bytes, to every
// peer. Steps 0xF0000+ of the current call's tag space; WAGMA sends nothing
// else on ctx.net inside this call.
class TransportExchange final : public transport::AddressExchange {
 public:
  TransportExchange(transport::Transport& net, uint64_t callSeq) : net_(net), callSeq_(callSeq) {}
  int rank() const override { return net_.rank(); }
  int size() const override { return net_.size(); }

  Status allgather(const std::string& mine, std::vector<std::string>* all) override {
    const int P = size(), me = rank();
    const uint64_t lenTag = transport::makeTag(callSeq_, 0xF0000 + 2 * round_);
    const uint64_t dataTag = transport::makeTag(callSeq_, 0xF0001 + 2 * round_);
    ++round_;
    all->assign(P, std::string());
    (*all)[me] = mine;
    const uint64_t myLen = mine.size();
    std::vector<uint64_t> lens(P, 0);
    {
      shared::RequestSet req(net_, "wagma channel setup");
      for (int p = 0; p < P; ++p) {
        if (p == me) continue;
        GC_CHECK(req.irecv(p, lenTag, &lens[p], sizeof(uint64_t)));
        GC_CHECK(req.isend(p, lenTag, &myLen, sizeof(uint64_t)));
      }
      GC_CHECK(req.waitAll());
    }
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      GC_REQUIRE(lens[p] <= (uint64_t(1) << 24), Err::RemoteError,
                 "wagma channel setup: peer %d announced a %llu-byte address", p,
                 (unsigned long long)lens[p]);
      (*all)[p].resize(lens[p]);
    }
    shared::RequestSet req(net_, "wagma channel setup");
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      GC_CHECK(req.irecv(p, dataTag, (*all)[p].data(), lens[p]));
      GC_CHECK(req.isend(p, dataTag, mine.data(), mine.size()));
    }
    GC_CHECK(req.waitAll());
    return Status::Ok();
  }

 private:
  transport::Transport& net_;
  const uint64_t callSeq_;
  uint64_t round_ = 0;
};

}  // namespace

ChannelFactory ucxChannelFactory() {
  return [](Context& ctx, std::unique_ptr<transport::Transport>* out) -> Status {
    TransportExchange exchange(ctx.net, ctx.callSeq);
    // Same ranks, same failure monitor: a verdict ends the channel's waits too.
    transport::UcxOptions options;
    options.monitor = ctx.net.failureMonitor();
    GC_CHECK(transport::createUcxTransport(exchange, options, out));
    (*out)->setActivity("wagma (wait-avoiding stream)");
    return Status::Ok();
  };
}

}  // namespace gradcomp::algo::wagma

// A private transport for one wait-avoiding WAGMA stream. Transports are not
// thread-safe, and the communicator's transport keeps serving the caller's
// other collectives while WAGMA's progress thread communicates between calls,
// so each stream gets its own channel between the same ranks.
#pragma once

#include <functional>
#include <memory>

#include "algorithms/algorithm.h"

namespace gradcomp::algo::wagma {

// Collective (every rank calls it inside the same allreduce); may use ctx.net
// from the calling thread. Returns a transport with ctx.net's rank and size.
using ChannelFactory =
    std::function<Status(Context& ctx, std::unique_ptr<transport::Transport>* out)>;

// The default: a new UCX worker per channel, wired by exchanging worker
// addresses over ctx.net (an AddressExchange on the communicator's transport).
ChannelFactory ucxChannelFactory();

}  // namespace gradcomp::algo::wagma

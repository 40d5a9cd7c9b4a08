// The blocking group allreduce of one WAGMA call: g butterfly exchange phases
// (pairs p, p XOR (1 << b) for b in groupBits(t)) with the fold of extra ranks
// around them (topology.h). Used by the caller thread in blocking mode and by
// the progress thread in wait-avoiding mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/wagma/topology.h"
#include "common/dtype.h"
#include "algorithms/dense/dense.h"
#include "device/arrays.h"
#include "transport/transport.h"

namespace gradcomp::algo::wagma {

// Transport step numbers of one group call (the caller turns them into tags).
constexpr uint64_t kStepFoldIn = 0;   // extra -> core partner: the extra's buffer
constexpr uint64_t kStepPhase0 = 1;   // butterfly phase j uses kStepPhase0 + j
constexpr uint64_t kStepFoldOut = 63; // core partner -> extra: the group sum

// In place: buf (count elements of t, device memory) becomes the sum of the
// buffers of every member of net.rank()'s group at call `call`. Every member
// ends with the bit-identical sum (each phase adds the same two partial sums,
// and float addition is commutative). Exchanges go through the host staging
// buffers (grown to one buffer each), one sync per exchange, as in
// dense/recursive_doubling.cc; complete on return.
Status groupSum(transport::Transport& net, device::Backend& dev, const Topology& topo,
                uint64_t call, const std::function<uint64_t(uint64_t step)>& tagOf, void* buf,
                size_t count, DataType t, dense::Staging* stage);

}  // namespace gradcomp::algo::wagma

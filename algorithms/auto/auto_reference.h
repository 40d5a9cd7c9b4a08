// The Reference of GRADCOMP_ALGO=auto: a replay of the choices the ranks
// agreed. auto records per call what ran (AutoAlgorithm::lastChoice, through
// gcCommLastAlgorithm): a candidate's label, or "dense(flush)" for the dense
// call that sent and cleared a compressor's residual (ef_flush.h). Before
// each expect() the caller hands that label to recordChoice(); the call is
// then expected as that candidate's own Reference computes it (configured
// like the candidate: the run's parameters plus the entry's), and a flush as
// FlushDense computes it. Every candidate's reference keeps its residuals in
// one shared CentralResiduals, as every candidate keeps them in the
// communicator's store, so residuals carry over between compressors and a
// flush sends exactly what they left.
#pragma once

#include <memory>
#include <string>

#include "algorithms/algorithm.h"

namespace gradcomp::algo::autosel {

// Marks the label of a dense call that flushed a residual: "dense(flush)".
inline constexpr const char* kFlushMark = "(flush)";

std::unique_ptr<Reference> makeAutoReference(int nranks);

}  // namespace gradcomp::algo::autosel

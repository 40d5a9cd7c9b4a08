// Reference factories of the quantized family configured by an explicit
// parameter set (the registry's factories read the environment and defaults,
// because Reference factories receive no configuration). For tests and tools
// that pass parameters as overrides.
#pragma once

#include <memory>

#include "algorithms/algorithm.h"

namespace gradcomp::algo::quant {

Status makeQsgdReference(int nranks, const param::Overrides& config,
                         std::unique_ptr<Reference>* out);
Status makeRbfReference(int nranks, const param::Overrides& config,
                        std::unique_ptr<Reference>* out);
Status makeSignReference(int nranks, const param::Overrides& config,
                         std::unique_ptr<Reference>* out);
Status makeFftReference(int nranks, const param::Overrides& config,
                        std::unique_ptr<Reference>* out);

}  // namespace gradcomp::algo::quant

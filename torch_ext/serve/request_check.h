// Checks a decoded infer request against the model's inputs before it takes a queue slot: every
// input present once, no unknown ones, the datatype and every fixed dimension as the metadata
// says. What the metadata leaves open (-1) is the model's to refuse.
#pragma once

#include <vector>

#include "kserve_codec.h"
#include "tensor.h"

namespace memoplan::serve {

// The request's inputs in the order of the model's forward arguments. Throws HttpError 400 with
// a message naming the input and what was expected.
std::vector<HostTensor> match_inputs(const std::vector<TensorSpec>& expected,
                                     std::vector<HostTensor> inputs);

// Throws HttpError 400 when the request asks for an output the model does not have: checked
// before the request takes a worker, when the outputs are known.
void check_requested_outputs(const std::vector<TensorSpec>& outputs,
                             const std::vector<RequestedOutput>& requested);

}  // namespace memoplan::serve

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

// An output as the response lists it: the request picks and orders the model's outputs (all of
// them, in order, when it names none), and a requested output keeps the client's name (OUTPUT__0
// as Triton's clients ask for it).
struct SelectedOutput {
  const HostTensor* tensor;
  bool binary;              // the HTTP binary tensor extension: raw bytes after the JSON header
  const std::string* name;  // the request's or the tensor's (both outlive the selection)
};
// Throws HttpError 400 when the request names an output the model does not have.
std::vector<SelectedOutput> select_outputs(const InferRequest& request,
                                           const std::vector<HostTensor>& outputs);

}  // namespace memoplan::serve

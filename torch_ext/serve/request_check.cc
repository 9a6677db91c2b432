#include "request_check.h"

#include "http_error.h"

namespace memoplan::serve {
namespace {

bool shape_fits(const TensorSpec& spec, const std::vector<int64_t>& shape) {
  if (spec.unchecked) return true;
  if (shape.size() != spec.shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (spec.shape[i] != -1 && spec.shape[i] != shape[i]) return false;
  }
  return true;
}

std::string names_of(const std::vector<TensorSpec>& specs) {
  std::string names;
  for (const TensorSpec& s : specs) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

}  // namespace

std::vector<HostTensor> match_inputs(const std::vector<TensorSpec>& expected,
                                     std::vector<HostTensor> inputs) {
  for (const HostTensor& in : inputs) {
    bool known = false;
    for (const TensorSpec& spec : expected) known = known || spec.name == in.name;
    if (!known) {
      throw bad_request("unknown input '" + in.name +
                        "' (the model's inputs: " + names_of(expected) + ")");
    }
  }
  std::vector<HostTensor> ordered;
  for (const TensorSpec& spec : expected) {
    auto it = inputs.begin();
    while (it != inputs.end() && it->name != spec.name) ++it;
    if (it == inputs.end()) {
      throw bad_request("the model takes " + std::to_string(expected.size()) + " input(s) (" +
                        names_of(expected) + "); '" + spec.name + "' is missing");
    }
    if (it->datatype != spec.datatype && !spec.unchecked) {
      throw bad_request("input '" + spec.name + "': datatype " + datatype_name(it->datatype) +
                        ", the model takes " + datatype_name(spec.datatype));
    }
    if (!shape_fits(spec, it->shape)) {
      throw bad_request("input '" + spec.name + "': shape " + shape_text(it->shape) +
                        ", the model takes " + shape_text(spec.shape) + " (-1: any size)");
    }
    ordered.push_back(std::move(*it));
  }
  return ordered;
}

void check_requested_outputs(const std::vector<TensorSpec>& outputs,
                             const std::vector<RequestedOutput>& requested) {
  for (const RequestedOutput& r : requested) {
    bool known = false;
    for (const TensorSpec& spec : outputs) known = known || spec.name == r.name;
    if (!known) {
      throw bad_request("unknown output '" + r.name +
                        "' (the model's outputs: " + names_of(outputs) + ")");
    }
  }
}

}  // namespace memoplan::serve

#include "request_check.h"

#include "http_error.h"
#include "tensor_names.h"

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

// "<name>__0 .. <name>__2" for three: Triton's names, any prefix (INPUT__0, output__1).
std::string positional_names(const std::vector<TensorSpec>& specs) {
  if (specs.size() <= 1) return "<name>__0";
  return "<name>__0 .. <name>__" + std::to_string(specs.size() - 1);
}

}  // namespace

std::vector<HostTensor> match_inputs(const std::vector<TensorSpec>& expected,
                                     std::vector<HostTensor> inputs) {
  // Each input's place among the model's, by name or by Triton's position (tensor_names.h).
  std::vector<HostTensor*> at(expected.size(), nullptr);
  for (HostTensor& in : inputs) {
    const std::optional<size_t> index = find_tensor(expected, in.name);
    if (!index) {
      throw bad_request("unknown input '" + in.name +
                        "' (the model's inputs: " + names_of(expected) + ", or by position " +
                        positional_names(expected) + ")");
    }
    if (at[*index]) {
      throw bad_request("input '" + expected[*index].name + "' given twice (as '" +
                        at[*index]->name + "' and '" + in.name + "')");
    }
    at[*index] = &in;
  }
  std::vector<HostTensor> ordered;
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorSpec& spec = expected[i];
    HostTensor* in = at[i];
    if (!in) {
      throw bad_request("the model takes " + std::to_string(expected.size()) + " input(s) (" +
                        names_of(expected) + "); '" + spec.name + "' is missing");
    }
    if (in->datatype != spec.datatype && !spec.unchecked) {
      throw bad_request("input '" + in->name + "': datatype " + datatype_name(in->datatype) +
                        ", the model takes " + datatype_name(spec.datatype));
    }
    if (!shape_fits(spec, in->shape)) {
      throw bad_request("input '" + in->name + "': shape " + shape_text(in->shape) +
                        ", the model takes " + shape_text(spec.shape) + " (-1: any size)");
    }
    ordered.push_back(std::move(*in));
  }
  return ordered;
}

void check_requested_outputs(const std::vector<TensorSpec>& outputs,
                             const std::vector<RequestedOutput>& requested) {
  for (const RequestedOutput& r : requested) {
    if (!find_tensor(outputs, r.name)) {
      throw bad_request("unknown output '" + r.name + "' (the model's outputs: " +
                        names_of(outputs) + ", or by position " + positional_names(outputs) + ")");
    }
  }
}

std::vector<SelectedOutput> select_outputs(const InferRequest& request,
                                           const std::vector<HostTensor>& outputs) {
  std::vector<SelectedOutput> selected;
  if (request.outputs.empty()) {
    for (const HostTensor& t : outputs) selected.push_back({&t, request.binary_outputs, &t.name});
  }
  for (const RequestedOutput& r : request.outputs) {
    const std::optional<size_t> index = find_tensor(outputs, r.name);
    if (!index) {
      std::string names;
      for (const HostTensor& t : outputs) names += (names.empty() ? "" : ", ") + t.name;
      throw bad_request("unknown output '" + r.name + "' (the model's outputs: " + names + ")");
    }
    selected.push_back({&outputs[*index], r.binary.value_or(request.binary_outputs), &r.name});
  }
  return selected;
}

}  // namespace memoplan::serve

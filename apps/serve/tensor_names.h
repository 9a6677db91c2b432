// Which of a model's tensors a client's name refers to. KServe v2 clients name a TorchScript
// model's tensors by forward's argument names ("x"); Triton's PyTorch backend names them by
// position, "<name>__<index>" (INPUT__0, input__0, OUTPUT__1: any prefix, the case as the client
// sends it). memoplan-serve takes both: an exact name first, else the position.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace memoplan::serve {

// The index in "<prefix>__<index>" (prefix not empty, index decimal digits only, no leading
// zeros but "0"); nullopt for any other name.
std::optional<size_t> positional_index(std::string_view name);

// The tensor `name` refers to among `tensors` (anything with a `name` member), or nullopt.
template <typename Tensor>
std::optional<size_t> find_tensor(const std::vector<Tensor>& tensors, std::string_view name) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return i;
  }
  const std::optional<size_t> index = positional_index(name);
  if (index && *index < tensors.size()) return index;
  return std::nullopt;
}

}  // namespace memoplan::serve

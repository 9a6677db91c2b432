#include "tensor_names.h"

namespace memoplan::serve {

std::optional<size_t> positional_index(std::string_view name) {
  const size_t separator = name.rfind("__");
  if (separator == std::string_view::npos || separator == 0) return std::nullopt;
  const std::string_view digits = name.substr(separator + 2);
  if (digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) {
    return std::nullopt;
  }
  size_t index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + static_cast<size_t>(c - '0');
  }
  return index;
}

}  // namespace memoplan::serve

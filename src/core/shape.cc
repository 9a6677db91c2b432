#include "memoplan/shape.h"

#include <charconv>

namespace memoplan {

Result<std::vector<int64_t>> parse_shape(std::string_view text, const ShapeRules& rules) {
  const std::string usage =
      "bad input shape '" + std::string(text) + "': expected sizes joined by x, e.g. 1x3x224x224";
  std::vector<int64_t> shape;
  int64_t elements = 1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t x = text.find('x', start);
    if (x == std::string_view::npos) x = text.size();
    const std::string_view dim = text.substr(start, x - start);
    int64_t size = 0;
    const auto parsed = std::from_chars(dim.data(), dim.data() + dim.size(), size);
    if (dim.empty() || parsed.ec != std::errc() || parsed.ptr != dim.data() + dim.size() ||
        size < 0 || (size == 0 && !rules.allow_zero)) {
      return Error{usage + (rules.allow_zero ? " (sizes >= 0)" : " (sizes >= 1)")};
    }
    shape.push_back(size);
    if (shape.size() > rules.max_dims) {
      return Error{usage + " (at most " + std::to_string(rules.max_dims) + " sizes)"};
    }
    if (size > 0 && elements > rules.max_elements / size) {
      return Error{"input shape '" + std::string(text) + "' is too large (over " +
                   std::to_string(rules.max_elements) + " elements)"};
    }
    elements *= size > 0 ? size : 1;
    start = x + 1;
  }
  return shape;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

}  // namespace memoplan

// Tensor shapes as people type them: "1x3x224x224". One parser for every program that takes a
// shape on its command line or in a model's extra files (memoplan run, memoplan-serve).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memoplan/planner/result.h"

namespace memoplan {

struct ShapeRules {
  bool allow_zero = false;                  // a 0-sized dimension (an empty batch)
  size_t max_dims = 8;                      // at most this many sizes
  int64_t max_elements = int64_t{1} << 31;  // their product at most this
};

// "1x3x224x224" -> {1, 3, 224, 224}. The error names the text and what is wrong with it.
Result<std::vector<int64_t>> parse_shape(std::string_view text, const ShapeRules& rules = {});
// {1, 3, 224, 224} -> "1x3x224x224".
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace memoplan

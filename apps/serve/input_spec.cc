#include "input_spec.h"

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "memoplan/shape.h"

namespace memoplan::serve {

InputDefault parse_input_default(std::string_view text) {
  InputDefault input;
  const std::string_view original = text;
  auto fail = [&](const std::string& why) {
    return std::invalid_argument("input \"" + std::string(original) + "\": " + why +
                                 " (expected e.g. 1x3x224x224 or 1x128:INT64)");
  };
  if (const size_t colon = text.find(':'); colon != std::string_view::npos) {
    const auto type = parse_datatype(text.substr(colon + 1));
    if (!type) throw fail("unknown datatype");
    input.datatype = *type;
    text = text.substr(0, colon);
  }
  ShapeRules rules;
  rules.allow_zero = true;  // an empty batch is a shape the protocol can carry
  rules.max_elements = INT64_MAX;
  Result<std::vector<int64_t>> shape = parse_shape(text, rules);
  if (!shape) throw fail(shape.error());
  input.shape = std::move(*shape);
  return input;
}

std::optional<DataType> datatype_of_torch_name(std::string_view name) {
  static constexpr std::pair<std::string_view, DataType> kNames[] = {
      {"bool", DataType::kBool},    {"uint8", DataType::kUint8},   {"int8", DataType::kInt8},
      {"int16", DataType::kInt16},  {"int32", DataType::kInt32},   {"int64", DataType::kInt64},
      {"float16", DataType::kFp16}, {"bfloat16", DataType::kBf16}, {"float32", DataType::kFp32},
      {"float64", DataType::kFp64},
  };
  for (const auto& [torch_name, type] : kNames) {
    if (name == torch_name) return type;
  }
  return std::nullopt;
}

std::string to_string(const InputDefault& input) {
  return shape_text(input.shape) + ":" + datatype_name(input.datatype);
}

}  // namespace memoplan::serve

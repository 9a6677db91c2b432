#include "input_spec.h"

#include <charconv>
#include <stdexcept>
#include <utility>

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
  while (!text.empty()) {
    const size_t x = text.find('x');
    const std::string_view dim = text.substr(0, x);
    int64_t value = 0;
    const auto result = std::from_chars(dim.data(), dim.data() + dim.size(), value);
    if (result.ec != std::errc() || result.ptr != dim.data() + dim.size() || value < 0) {
      throw fail("dimensions must be non-negative integers separated by 'x'");
    }
    input.shape.push_back(value);
    if (x == std::string_view::npos) break;
    text = text.substr(x + 1);
    if (text.empty()) throw fail("trailing 'x'");
  }
  if (input.shape.empty()) throw fail("no dimensions");
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
  std::string text;
  for (size_t i = 0; i < input.shape.size(); ++i) {
    text += (i ? "x" : "") + std::to_string(input.shape[i]);
  }
  return text + ":" + datatype_name(input.datatype);
}

}  // namespace memoplan::serve

#include "input_spec.h"

#include <algorithm>
#include <charconv>

namespace memoplan::run {
namespace {

const char* const kDtypes[] = {"float32", "float64", "float16", "bfloat16", "int64",
                               "int32",   "int16",   "int8",    "uint8",    "bool"};

bool parse_int(const std::string& text, int64_t& value) {
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  return result.ec == std::errc() && result.ptr == end;
}

}  // namespace

bool known_dtype(const std::string& dtype) {
  return std::find(std::begin(kDtypes), std::end(kDtypes), dtype) != std::end(kDtypes);
}

bool integer_dtype(const std::string& dtype) {
  return known_dtype(dtype) && dtype.rfind("float", 0) != 0 && dtype != "bfloat16";
}

Result<InputSpec> make_input_spec(const std::string& model, const std::string& input_flag,
                                  const std::string& dtype_flag, const std::string& file_shape,
                                  const std::string& file_dtype, const std::string& file_high) {
  InputSpec spec;
  if (input_flag.empty() && file_shape.empty()) {
    return Error{model +
                 " carries no input shape: give one with --input, e.g. --input 1x3x224x224"};
  }
  Result<std::vector<int64_t>> shape = parse_shape(input_flag.empty() ? file_shape : input_flag);
  if (!shape) return Error{(input_flag.empty() ? model + ": " : "") + shape.error()};
  spec.shape = std::move(*shape);
  if (!dtype_flag.empty()) {
    spec.dtype = dtype_flag;
  } else if (!file_dtype.empty()) {
    spec.dtype = file_dtype;
  }
  if (!known_dtype(spec.dtype)) {
    return Error{"unknown dtype '" + spec.dtype + "' (" + kDtypeList + ")"};
  }
  if (!file_high.empty() && (!parse_int(file_high, spec.high) || spec.high <= 0)) {
    return Error{model + ": bad input_high '" + file_high + "'"};
  }
  if (spec.dtype == "bool") spec.high = 2;
  return spec;
}

}  // namespace memoplan::run

#include "input_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

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

Result<std::pair<std::vector<int64_t>, std::vector<int64_t>>> parse_shape_range(
    const std::string& text) {
  std::string low, high;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('x', start), text.size());
    const std::string dim = text.substr(start, end - start);
    const size_t colon = dim.find(':');
    const std::string sep = start ? "x" : "";
    low += sep + dim.substr(0, colon);
    high += sep + (colon == std::string::npos ? dim : dim.substr(colon + 1));
    start = end + 1;
  }
  Result<std::vector<int64_t>> lo = parse_shape(low);
  if (!lo) return Error{"bad input '" + text + "': " + lo.error()};
  Result<std::vector<int64_t>> hi = parse_shape(high);
  if (!hi) return Error{"bad input '" + text + "': " + hi.error()};
  for (size_t d = 0; d < lo->size(); ++d) {
    if ((*lo)[d] > (*hi)[d]) {
      return Error{"bad input '" + text + "': dim " + std::to_string(d) + " has LO > HI"};
    }
  }
  return std::make_pair(std::move(*lo), std::move(*hi));
}

std::string spec_shape_text(const InputSpec& spec) {
  if (!spec.varies()) return shape_text(spec.shape);
  std::string s;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    s += (d ? "x" : "") + std::to_string(spec.shape[d]);
    if (spec.high_shape[d] != spec.shape[d]) s += ":" + std::to_string(spec.high_shape[d]);
  }
  return s;
}

std::optional<Draw> parse_draw(const std::string& text) {
  if (text == "uniform") return Draw::kUniform;
  if (text == "lognormal") return Draw::kLognormal;
  return std::nullopt;
}

const char* to_string(Draw draw) { return draw == Draw::kLognormal ? "lognormal" : "uniform"; }

std::vector<int64_t> draw_shape(const InputSpec& spec, uint64_t seed, uint64_t index) {
  if (!spec.varies()) return spec.shape;
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + index);
  // In [0, 1) from 53 of the generator's bits: the same everywhere.
  auto unit = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  std::vector<int64_t> shape = spec.shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t lo = spec.shape[d], hi = spec.high_shape[d];
    if (lo == hi) continue;
    if (spec.draw == Draw::kUniform) {
      const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
      shape[d] = lo + static_cast<int64_t>(unit() * static_cast<double>(span));
    } else {
      const double log_lo = std::log(static_cast<double>(lo)),
                   log_hi = std::log(static_cast<double>(hi));
      const double mu = (log_lo + log_hi) / 2, sigma = (log_hi - log_lo) / 5;
      // Box-Muller: a standard normal from two uniforms (1 - unit() is in (0, 1]).
      const double normal =
          std::sqrt(-2 * std::log(1 - unit())) * std::cos(2 * 3.14159265358979323846 * unit());
      shape[d] = static_cast<int64_t>(std::llround(std::exp(mu + sigma * normal)));
    }
    shape[d] = std::clamp(shape[d], lo, hi);
  }
  return shape;
}

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
  if (input_flag.empty()) {
    Result<std::vector<int64_t>> shape = parse_shape(file_shape);
    if (!shape) return Error{model + ": " + shape.error()};
    spec.shape = std::move(*shape);
  } else {
    auto range = parse_shape_range(input_flag);
    if (!range) return Error{range.error()};
    spec.shape = std::move(range->first);
    if (range->second != spec.shape) spec.high_shape = std::move(range->second);
  }
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

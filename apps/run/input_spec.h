// The input `memoplan run` feeds a model: its shape, dtype and, for integer inputs (token ids),
// the exclusive upper bound of the values. From --input/--dtype, else from the extra files the
// model zoo stores in each archive (`input_shape`, `input_dtype`, `input_high`; see
// bench/models/make_zoo.py). No torch headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memoplan/planner/result.h"
#include "memoplan/shape.h"

namespace memoplan::run {

// How a ranged dim is drawn (--draw).
enum class Draw {
  kUniform,    // every value of LO..HI alike
  kLognormal,  // as request lengths come in practice: most short, a long tail (draw_shape)
};
// "uniform" or "lognormal"; nullopt for anything else.
std::optional<Draw> parse_draw(const std::string& text);
const char* to_string(Draw draw);

struct InputSpec {
  std::vector<int64_t> shape;       // fixed: the shape; a range: each dim's lowest value
  std::vector<int64_t> high_shape;  // a range (--input 1x8:256): each dim's highest; else empty
  Draw draw = Draw::kUniform;
  std::string dtype = "float32";
  int64_t high = 2;  // integer inputs are drawn from [0, high)
  bool varies() const { return !high_shape.empty(); }
};

// "1x3x224x224", or with ranges "1x8:256" (each dim N or LO:HI, 1 <= LO <= HI): the lowest and the
// highest shape (equal without ranges), each checked as parse_shape checks one.
Result<std::pair<std::vector<int64_t>, std::vector<int64_t>>> parse_shape_range(
    const std::string& text);
// The text of a spec's shape: "1x8:256" for a range.
std::string spec_shape_text(const InputSpec& spec);
// The shape of pass `index` of a run seeded `seed`: every ranged dim drawn from its range, the
// same for the same (seed, index) on every machine (std::mt19937_64's bits, no library
// distribution). kLognormal: the median at the range's geometric middle, LO and HI 2.5 standard
// deviations below and above it, clamped to the range (1x8:256: half the passes at most 45, one
// in ten above 110).
std::vector<int64_t> draw_shape(const InputSpec& spec, uint64_t seed, uint64_t index);

// Shapes: memoplan::parse_shape (1 to 8 positive sizes, at most 2^31 elements in all).
using memoplan::parse_shape;
using memoplan::shape_text;

// The dtypes an input can have.
inline constexpr const char* kDtypeList =
    "float32 float64 float16 bfloat16 int64 int32 int16 int8 uint8 bool";
bool known_dtype(const std::string& dtype);
bool integer_dtype(const std::string& dtype);

// Combines the command line's --input/--dtype (win when non-empty) with the file's extra files
// (empty when absent). `model` names the file in messages.
Result<InputSpec> make_input_spec(const std::string& model, const std::string& input_flag,
                                  const std::string& dtype_flag, const std::string& file_shape,
                                  const std::string& file_dtype, const std::string& file_high);

}  // namespace memoplan::run

#include "datatype.h"

#include <cstring>

namespace memoplan::serve {
namespace {

struct TypeInfo {
  DataType type;
  const char* name;
  size_t size;
};

constexpr TypeInfo kTypes[] = {
    {DataType::kBool, "BOOL", 1},   {DataType::kUint8, "UINT8", 1}, {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2}, {DataType::kInt32, "INT32", 4}, {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},   {DataType::kBf16, "BF16", 2},   {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
};

const TypeInfo& info(DataType type) { return kTypes[static_cast<int>(type)]; }

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

std::optional<DataType> parse_datatype(std::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (name == t.name) return t.type;
  }
  return std::nullopt;
}

const char* datatype_name(DataType type) { return info(type).name; }
size_t element_size(DataType type) { return info(type).size; }

bool is_floating(DataType type) {
  return type == DataType::kFp16 || type == DataType::kBf16 || type == DataType::kFp32 ||
         type == DataType::kFp64;
}

uint16_t float_to_half(float value) {
  uint32_t f = bits_of(value);
  const auto sign = static_cast<uint16_t>((f >> 16) & 0x8000);
  f &= 0x7fffffff;
  if (f >= 0x7f800000) {  // infinity stays infinity, NaN stays a (quiet) NaN
    return sign | 0x7c00 | (f > 0x7f800000 ? 0x200 : 0);
  }
  if (f >= 0x477ff000) return sign | 0x7c00;  // 65520 and up round to infinity
  if (f < 0x38800000) {
    // Below the smallest normal half (2^-14): adding 0.5 puts the value on a grid of 2^-24, the
    // smallest subnormal half, rounded to nearest even by the FPU; the mantissa is the result.
    const uint32_t r = bits_of(float_of(f) + 0.5f);
    return sign | static_cast<uint16_t>(r - bits_of(0.5f));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  f += 0xc8000fffu + ((f >> 13) & 1);
  return sign | static_cast<uint16_t>(f >> 13);
}

float half_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000 | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in float
    return float_of(sign | bits_of(static_cast<float>(mantissa) * 0x1p-24f));
  }
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_bfloat16(float value) {
  uint32_t f = bits_of(value);
  if ((f & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((f >> 16) | 0x40);  // quiet NaN
  f += 0x7fff + ((f >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(f >> 16);
}

float bfloat16_to_float(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

}  // namespace memoplan::serve

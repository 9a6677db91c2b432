// The KServe v2 tensor datatypes ("FP32", "INT64", ...) the server speaks, their element sizes,
// and the 16-bit float conversions the JSON codec needs. No torch headers: the model's translation
// unit maps them to at::ScalarType.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memoplan::serve {

// Only the types LibTorch 1.13 has a dtype for: UINT16/32/64 and BYTES (strings) are answered
// with 400 "unsupported datatype".
enum class DataType { kBool, kUint8, kInt8, kInt16, kInt32, kInt64, kFp16, kBf16, kFp32, kFp64 };

// "FP32" -> kFp32; nullopt for a name the protocol lacks or the server does not support.
std::optional<DataType> parse_datatype(std::string_view name);
const char* datatype_name(DataType type);
size_t element_size(DataType type);
bool is_floating(DataType type);

// IEEE binary16 and bfloat16 from and to float, rounding to nearest even (what c10::Half and
// c10::BFloat16 do), so a JSON value sent for an FP16 input is the value torch would store.
uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);

}  // namespace memoplan::serve

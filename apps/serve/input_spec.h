// A model's default input as text: "1x3x224x224" (FP32) or "1x128:INT64". It comes from
// --input or from the TorchScript file's extra files "input_shape" and "input_dtype" (what
// bench/models/make_zoo.py writes); the server plans it before it reports ready.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "datatype.h"

namespace memoplan::serve {

struct InputDefault {
  std::vector<int64_t> shape;
  DataType datatype = DataType::kFp32;
};

// Throws std::invalid_argument naming what is wrong.
InputDefault parse_input_default(std::string_view text);
// A torch dtype's name as the model zoo's extra file "input_dtype" spells it ("float32",
// "int64", ...); nullopt for one the protocol cannot carry.
std::optional<DataType> datatype_of_torch_name(std::string_view name);
std::string to_string(const InputDefault& input);  // "1x3x224x224:FP32"

}  // namespace memoplan::serve

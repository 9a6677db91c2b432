// Whether the planned and the unplanned module returned the same thing, bit for bit: tensors by
// dtype, shape and bytes (NaNs included: a bitwise test, not ==), through tuples, lists and dicts.
#pragma once

#include <string>

namespace c10 {
struct IValue;
}

namespace memoplan::run {

// "" when `a` and `b` are bit-identical, else where they first differ ("output[1]: bytes differ").
std::string output_difference(const c10::IValue& a, const c10::IValue& b);

}  // namespace memoplan::run

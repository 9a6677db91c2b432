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

// For outputs that may differ in rounding (tuned kernels sum in another order): the largest
// max|a - b| / max|b| over the floating-point tensors of the outputs (0 when equal); -1 when
// their structure, dtypes, shapes or non-float values differ.
double max_relative_difference(const c10::IValue& a, const c10::IValue& b);

}  // namespace memoplan::run

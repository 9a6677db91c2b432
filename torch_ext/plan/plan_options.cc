// The names of PlanOptions' settings (memoplan/torch/plan.h) as the CLI, Python and the reports
// spell them.
#include <optional>
#include <string_view>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {

const char* name(Kernels kernels) { return kernels == Kernels::kTuned ? "tuned" : "stock"; }
const char* name(Memory memory) { return memory == Memory::kMin ? "min" : "offset"; }

std::optional<Kernels> parse_kernels(std::string_view text) {
  if (text == "stock") return Kernels::kStock;
  if (text == "tuned") return Kernels::kTuned;
  return std::nullopt;
}

std::optional<Memory> parse_memory(std::string_view text) {
  if (text == "offset") return Memory::kOffset;
  if (text == "min") return Memory::kMin;
  return std::nullopt;
}

}  // namespace memoplan::torch_ext

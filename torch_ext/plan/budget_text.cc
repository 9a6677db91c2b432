// parse_budget (memoplan/torch/budget.h): a budget as text.
#include "memoplan/torch/budget.h"

#include <cmath>
#include <cstdlib>

namespace memoplan::torch_ext {

std::optional<BudgetText> parse_budget(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(number) || number <= 0) return std::nullopt;
  const std::string unit(end);
  BudgetText budget;
  if (unit == "%") {
    if (number > 1000) return std::nullopt;
    budget.percent = number;
    return budget;
  }
  static const struct {
    const char* name;
    double scale;
  } kUnits[] = {{"", 1},          {"B", 1},         {"K", 1e3},      {"KB", 1e3},
                {"M", 1e6},       {"MB", 1e6},      {"G", 1e9},      {"GB", 1e9},
                {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  for (const auto& u : kUnits) {
    if (unit != u.name) continue;
    const double bytes = number * u.scale;
    if (bytes < 1 || bytes > 1e18) return std::nullopt;
    budget.bytes = static_cast<uint64_t>(std::llround(bytes));
    return budget;
  }
  return std::nullopt;
}

}  // namespace memoplan::torch_ext

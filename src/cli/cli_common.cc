#include "cli_common.h"

#include <fmt/core.h>

namespace memoplan::cli {

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", value, value < 10 ? 2 : value < 100 ? 1 : 0, units[unit]);
}

int fail(const std::string& message) {
  fmt::print(stderr, "memoplan: error: {}\n", message);
  return kExitBadInput;
}

}  // namespace memoplan::cli

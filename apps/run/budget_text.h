// `memoplan run --budget`'s text: "64MiB", "1.5GiB", "512KB", "100000" (bytes; K/M/G are powers
// of 1000, KiB/MiB/GiB of 1024) or "25%" (of the weights plus the slab). No torch headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace memoplan::run {

struct BudgetText {
  uint64_t bytes = 0;  // when given in bytes
  double percent = 0;  // when given as a share (0 < percent <= 1000)
};

// nullopt for text that is neither (and for 0 bytes or 0%).
std::optional<BudgetText> parse_budget(const std::string& text);

}  // namespace memoplan::run

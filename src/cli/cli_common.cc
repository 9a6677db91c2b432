#include "cli_common.h"

#include <fmt/core.h>

namespace memoplan::cli {

int fail(const std::string& message) {
  fmt::print(stderr, "memoplan: error: {}\n", message);
  return kExitBadInput;
}

}  // namespace memoplan::cli

#include "memoplan/planner/lower_bound.h"

#include "operator_profiles.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace memoplan::planner {
namespace {

// (time, signed size) events; at equal times frees sort first because lifetimes are half-open.
std::vector<std::pair<uint64_t, int64_t>> live_deltas(const Problem& problem) {
  std::vector<std::pair<uint64_t, int64_t>> deltas;
  deltas.reserve(2 * problem.blocks.size());
  for (const Block& b : problem.blocks) {
    deltas.emplace_back(b.begin, static_cast<int64_t>(b.size));
    deltas.emplace_back(b.end, -static_cast<int64_t>(b.size));
  }
  std::sort(deltas.begin(), deltas.end());
  return deltas;
}

}  // namespace

uint64_t offset_lower_bound(const Problem& problem) {
  int64_t live = 0, peak = 0;
  for (const auto& [time, delta] : live_deltas(problem)) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

uint64_t shared_objects_lower_bound(const Problem& problem) {
  uint64_t total = 0;
  for (uint64_t size : positional_maxima(problem)) total += size;
  return total;
}

}  // namespace memoplan::planner

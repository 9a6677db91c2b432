#include "memoplan/planner/lower_bound.h"

#include <algorithm>
#include <functional>
#include <set>
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
  // The operator profiles that matter are the live sets just after each allocation: any other live
  // set is a subset of one of them, and a subset's sorted sizes are dominated position by position.
  const auto& blocks = problem.blocks;
  std::vector<size_t> by_begin(blocks.size()), by_end(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) by_begin[i] = by_end[i] = i;
  std::sort(by_begin.begin(), by_begin.end(),
            [&](size_t a, size_t b) { return blocks[a].begin < blocks[b].begin; });
  std::sort(by_end.begin(), by_end.end(),
            [&](size_t a, size_t b) { return blocks[a].end < blocks[b].end; });

  std::multiset<uint64_t, std::greater<>> live;
  std::vector<uint64_t> positional_max;
  size_t next_end = 0;
  for (size_t k = 0; k < by_begin.size();) {
    const uint64_t now = blocks[by_begin[k]].begin;
    while (next_end < by_end.size() && blocks[by_end[next_end]].end <= now) {
      live.erase(live.find(blocks[by_end[next_end]].size));
      ++next_end;
    }
    for (; k < by_begin.size() && blocks[by_begin[k]].begin == now; ++k) {
      live.insert(blocks[by_begin[k]].size);
    }
    if (live.size() > positional_max.size()) positional_max.resize(live.size(), 0);
    size_t position = 0;
    for (uint64_t size : live) {
      positional_max[position] = std::max(positional_max[position], size);
      ++position;
    }
  }
  uint64_t total = 0;
  for (uint64_t size : positional_max) total += size;
  return total;
}

}  // namespace memoplan::planner

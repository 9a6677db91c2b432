// MemoMalloc's bump allocation: walk the pass in time order with one bump pointer. A new block goes
// at the pointer; when blocks at the top of the stack die the pointer rolls back over them, so
// stack-like (LIFO) lifetimes reuse memory and nothing else does.
#include <algorithm>
#include <numeric>

#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_bump(const Problem& problem, const StrategyOptions&) {
  const auto& blocks = problem.blocks;
  // Events in time order; at equal ticks frees come first (lifetimes are half-open).
  struct Event {
    uint64_t time;
    bool is_alloc;
    size_t block;
  };
  std::vector<Event> events;
  events.reserve(2 * blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    events.push_back({blocks[i].begin, true, i});
    events.push_back({blocks[i].end, false, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.is_alloc != b.is_alloc) return !a.is_alloc;
    return a.block < b.block;
  });

  StrategyResult result;
  result.offsets.assign(blocks.size(), 0);
  std::vector<size_t> stack;  // blocks in address order, lowest first
  std::vector<bool> dead(blocks.size(), false);
  uint64_t top = 0;
  for (const Event& e : events) {
    if (e.is_alloc) {
      result.offsets[e.block] = top;
      top += blocks[e.block].size;
      stack.push_back(e.block);
    } else {
      dead[e.block] = true;
      while (!stack.empty() && dead[stack.back()]) {
        top = result.offsets[stack.back()];
        stack.pop_back();
      }
    }
  }
  return result;
}

}  // namespace memoplan::planner

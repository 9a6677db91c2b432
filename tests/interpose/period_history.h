// Synthetic allocation histories for the pass-detection tests: a pass "shape" (the keys in pass
// order and how long each block lives, in allocations) repeated pass after pass, on the same event
// clock the shim uses (one tick per allocation or free), and find_period run on one.
#pragma once

#include <cstdint>
#include <vector>

#include "period.h"
#include "state.h"

namespace memoplan::shim::histories {

inline constexpr uint64_t kMaxPeriod = 1 << 16;

struct History {
  std::vector<uint64_t> keys, begins, ends;
};

// One block of a pass: its key, and how many later allocations of the same pass it outlives
// (0: freed before the next allocation). A block never outlives its pass.
struct BlockShape {
  uint64_t key;
  uint64_t lifetime;
};

// `passes` repetitions of `shape`, truncated to `n` records when n > 0.
inline History repeat(const std::vector<BlockShape>& shape, uint64_t passes, uint64_t n = 0) {
  History h;
  uint64_t tick = 0;
  for (uint64_t pass = 0; pass < passes; ++pass) {
    const uint64_t first = h.keys.size();
    std::vector<std::vector<uint64_t>> frees_after(shape.size());  // records freed after alloc i
    for (uint64_t i = 0; i < shape.size(); ++i) {
      const uint64_t last = std::min<uint64_t>(i + shape[i].lifetime, shape.size() - 1);
      frees_after[last].push_back(first + i);
    }
    for (uint64_t i = 0; i < shape.size(); ++i) {
      h.keys.push_back(shape[i].key);
      h.begins.push_back(tick++);
      h.ends.push_back(record::kLive);
      for (uint64_t record : frees_after[i]) h.ends[record] = tick++;
    }
  }
  if (n) {
    h.keys.resize(n);
    h.begins.resize(n);
    // Blocks freed after the cut were still alive when the search ran.
    // The search runs right after the newest allocation is recorded, before any later free.
    const uint64_t now = h.begins[n - 1];
    h.ends.resize(n);
    for (uint64_t& end : h.ends) {
      if (end != record::kLive && end > now) end = record::kLive;
    }
  }
  return h;
}

inline PeriodResult search(const History& h, uint64_t max_period = kMaxPeriod,
                           uint64_t required_key = 0, uint64_t min_run = 0, uint64_t min_period = 1,
                           uint64_t not_multiple_of = 0) {
  std::vector<uint64_t> scratch(2 * h.keys.size() + 2);
  PeriodQuery query;
  query.not_multiple_of = not_multiple_of;
  query.max_period = max_period;
  query.required_key = required_key;
  query.min_run = min_run;
  query.min_period = min_period;
  return find_period(h.keys.data(), h.begins.data(), h.ends.data(), h.keys.size(), query,
                     scratch.data());
}

// Every block freed before the next allocation: no lifetime crosses any boundary.
inline std::vector<BlockShape> distinct_keys(uint64_t count) {
  std::vector<BlockShape> shape;
  for (uint64_t i = 0; i < count; ++i) shape.push_back({100 + i, 0});
  return shape;
}

}  // namespace memoplan::shim::histories

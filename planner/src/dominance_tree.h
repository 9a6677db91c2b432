// Slots in a fixed order (the caller sorts its items by some key and maps key limits to slot
// limits), each holding an optional value that can change. Answers "the last slot before `limit`
// holding a value >= `floor`" in O(log n) and lists every such slot in O(log n) each.
//
// This is the 2-D dominance query behind the shared-objects strategies and the operator-profile
// drain: "the free window that starts latest before t and still reaches past t'", "the unplaced
// blocks that began by t and end after it". Without it those are O(n) scans per block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace memoplan::planner {

class DominanceTree {
 public:
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  explicit DominanceTree(size_t slots) {
    while (leaves_ < slots) leaves_ *= 2;
    max_.assign(2 * leaves_, kEmpty);
  }

  int64_t value(size_t slot) const { return max_[leaves_ + slot]; }

  // kEmpty clears the slot.
  void set(size_t slot, int64_t value) {
    size_t node = leaves_ + slot;
    max_[node] = value;
    for (node /= 2; node >= 1; node /= 2) max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
  }

  // The highest slot below `limit` whose value is >= floor (floor > kEmpty), or kNone.
  size_t last_at_least(size_t limit, int64_t floor) const {
    return limit == 0 ? kNone : last(1, 0, leaves_, limit, floor);
  }

  // The lowest slot in [from, limit) whose value is >= floor, or kNone: for listing lazily.
  size_t first_at_least(size_t from, size_t limit, int64_t floor) const {
    return from >= limit ? kNone : first(1, 0, leaves_, from, limit, floor);
  }

  // Calls fn(slot) for every slot below `limit` whose value is >= floor, in slot order.
  template <typename Fn>
  void for_each_at_least(size_t limit, int64_t floor, Fn&& fn) const {
    if (limit > 0) each(1, 0, leaves_, limit, floor, fn);
  }

 private:
  size_t last(size_t node, size_t lo, size_t hi, size_t limit, int64_t floor) const {
    if (lo >= limit || max_[node] < floor) return kNone;
    if (hi - lo == 1) return lo;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t right = last(2 * node + 1, mid, hi, limit, floor);
    return right != kNone ? right : last(2 * node, lo, mid, limit, floor);
  }

  size_t first(size_t node, size_t lo, size_t hi, size_t from, size_t limit, int64_t floor) const {
    if (hi <= from || lo >= limit || max_[node] < floor) return kNone;
    if (hi - lo == 1) return lo;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t left = first(2 * node, lo, mid, from, limit, floor);
    return left != kNone ? left : first(2 * node + 1, mid, hi, from, limit, floor);
  }

  template <typename Fn>
  void each(size_t node, size_t lo, size_t hi, size_t limit, int64_t floor, Fn& fn) const {
    if (lo >= limit || max_[node] < floor) return;
    if (hi - lo == 1) {
      fn(lo);
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    each(2 * node, lo, mid, limit, floor, fn);
    each(2 * node + 1, mid, hi, limit, floor, fn);
  }

  size_t leaves_ = 1;
  std::vector<int64_t> max_;  // 1-based segment tree, leaves at [leaves_, 2 * leaves_)
};

}  // namespace memoplan::planner

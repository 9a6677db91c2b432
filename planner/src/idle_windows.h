// The idle time of shared objects (Pisarchyk & Lee 2020, §4): an object may take a block only
// during one of its "windows", the stretches between the lifetimes of the blocks it already holds.
// Both shared-objects strategies ask which windows hold a block's whole lifetime; indexing the
// windows in DominanceTrees answers that in O(log n) per window instead of scanning every object.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "dominance_tree.h"
#include "memoplan/planner/problem.h"

namespace memoplan::planner {

// Ticks replaced by their rank among all distinct ticks (1..K), so the trees can mirror them by
// negation; 0 stands for "before everything", K + 1 for "after everything".
struct TickRanks {
  explicit TickRanks(const Problem& problem) {
    std::vector<uint64_t> ticks;
    for (const Block& b : problem.blocks) {
      ticks.push_back(b.begin);
      ticks.push_back(b.end);
    }
    std::sort(ticks.begin(), ticks.end());
    ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
    auto rank = [&](uint64_t t) {
      return static_cast<int64_t>(std::lower_bound(ticks.begin(), ticks.end(), t) - ticks.begin()) +
             1;
    };
    for (const Block& b : problem.blocks) {
      begin.push_back(rank(b.begin));
      end.push_back(rank(b.end));
    }
    after_all = static_cast<int64_t>(ticks.size()) + 1;
  }
  std::vector<int64_t> begin, end;  // per block
  int64_t after_all = 1;
};

// An idle stretch of `object` between its blocks `left` and `right`; kNone means before its first
// or after its last block.
struct Window {
  static constexpr size_t kNone = DominanceTree::kNone;
  size_t object = kNone;
  size_t left = kNone;
  size_t right = kNone;
};

// Every object's blocks as a time-ordered list, and the windows between them in two trees: by_start
// (slot per left delimiter, sorted by where the window starts, holding where it ends) and by_finish
// (the mirror image). A window is identified by its by_start slot and the end rank stored there;
// the end only ever moves earlier as blocks land in the window, so a stale identity never matches.
class IdleWindows {
 public:
  static constexpr size_t kNone = Window::kNone;

  IdleWindows(const Problem& problem, const TickRanks& ranks)
      : ranks_(ranks),
        n_(problem.blocks.size()),
        first_(n_, kNone),
        last_(n_, kNone),
        prev_(n_, kNone),
        next_(n_, kNone),
        object_of_(n_, kNone),
        by_start_(2 * n_),
        by_finish_(2 * n_) {
    // Slots [0, n) are per object (its window before its first block in by_start, after its last
    // in by_finish); slots [n, 2n) are per block, sorted by the tick the window is bounded by.
    start_keys_.assign(n_, 0);
    finish_keys_.assign(n_, -ranks.after_all);
    std::vector<size_t> order(n_);
    std::iota(order.begin(), order.end(), size_t{0});
    after_slot_.resize(n_);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranks.end[a] < ranks.end[b]; });
    for (size_t p = 0; p < n_; ++p) {
      after_slot_[order[p]] = n_ + p;
      start_keys_.push_back(ranks.end[order[p]]);
    }
    block_after_ = order;
    before_slot_.resize(n_);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranks.begin[a] > ranks.begin[b]; });
    for (size_t p = 0; p < n_; ++p) {
      before_slot_[order[p]] = n_ + p;
      finish_keys_.push_back(-ranks.begin[order[p]]);
    }
    block_before_ = order;
  }

  const std::vector<size_t>& object_of() const { return object_of_; }

  size_t open(size_t block) {
    const size_t object = objects_++;
    first_[object] = last_[object] = block;
    object_of_[block] = object;
    index({object, kNone, block});
    index({object, block, kNone});
    return object;
  }

  void assign(const Window& w, size_t block) {
    object_of_[block] = w.object;
    prev_[block] = w.left;
    next_[block] = w.right;
    (w.left == kNone ? first_[w.object] : next_[w.left]) = block;
    (w.right == kNone ? last_[w.object] : prev_[w.right]) = block;
    index({w.object, w.left, block});
    index({w.object, block, w.right});
  }

  Window before_first(size_t object) const { return {object, kNone, first_[object]}; }
  Window after_last(size_t object) const { return {object, last_[object], kNone}; }

  size_t start_slot(const Window& w) const {
    return w.left == kNone ? w.object : after_slot_[w.left];
  }
  int64_t end_rank(const Window& w) const {
    return w.right == kNone ? ranks_.after_all : ranks_.begin[w.right];
  }
  bool alive(size_t start_slot, int64_t end_rank) const {
    return by_start_.value(start_slot) == end_rank;
  }
  Window at_start_slot(size_t slot) const {
    if (slot < n_) return before_first(slot);
    const size_t left = block_after_[slot - n_];
    return {object_of_[left], left, next_[left]};
  }

  // Of the windows holding `block`'s whole lifetime, the one starting latest; object kNone when
  // none of them starts at a finite tick.
  Window latest_start_around(size_t block) const {
    const size_t limit = upper(start_keys_, ranks_.begin[block]);
    const size_t slot = by_start_.last_at_least(limit, ranks_.end[block]);
    return slot == kNone || slot < n_ ? Window{} : at_start_slot(slot);
  }

  // Of the windows holding `block`'s whole lifetime, the one ending earliest; object kNone when
  // none of them ends at a finite tick.
  Window earliest_end_around(size_t block) const {
    const size_t limit = upper(finish_keys_, -ranks_.end[block]);
    const size_t slot = by_finish_.last_at_least(limit, -ranks_.begin[block]);
    if (slot == kNone || slot < n_) return {};
    const size_t right = block_before_[slot - n_];
    return {object_of_[right], prev_[right], right};
  }

  // Lists the windows holding `block`'s whole lifetime one at a time, in start-slot order: the
  // first at or after slot `from`, or kNone. Each call is O(log n).
  size_t next_slot_around(size_t block, size_t from) const {
    const size_t limit = upper(start_keys_, ranks_.begin[block]);
    return by_start_.first_at_least(from, limit, ranks_.end[block]);
  }

 private:
  static size_t upper(const std::vector<int64_t>& keys, int64_t key) {
    return std::upper_bound(keys.begin(), keys.end(), key) - keys.begin();
  }

  void index(const Window& w) {
    by_start_.set(start_slot(w), end_rank(w));
    const size_t finish_slot = w.right == kNone ? w.object : before_slot_[w.right];
    by_finish_.set(finish_slot, w.left == kNone ? 0 : -ranks_.end[w.left]);
  }

  const TickRanks& ranks_;
  size_t n_;
  size_t objects_ = 0;
  std::vector<size_t> first_, last_;                // per object: its earliest and latest block
  std::vector<size_t> prev_, next_;                 // per block: its neighbours in its object
  std::vector<size_t> object_of_;                   // per block
  std::vector<size_t> after_slot_, before_slot_;    // per block: its slot in by_start_, by_finish_
  std::vector<size_t> block_after_, block_before_;  // slot - n -> block
  std::vector<int64_t> start_keys_, finish_keys_;   // per slot, ascending
  DominanceTree by_start_;                          // value: end rank of the window
  DominanceTree by_finish_;  // keys and values mirrored: -end rank, -start rank
};

}  // namespace memoplan::planner

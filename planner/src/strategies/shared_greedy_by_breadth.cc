// Pisarchyk & Lee 2020, §4.2 (Algorithm 1): Greedy by Breadth for shared objects. Operators in
// non-increasing breadth; for each, its unassigned blocks in non-increasing size. An object is
// suitable for a block when none of its blocks' lifetimes overlaps the block's. Then:
//   1. suitable objects at least as big as the block exist: take the smallest of them;
//   2. only smaller suitable objects exist: take the largest and grow it to the block's size;
//   3. no suitable object: open a new one of the block's size.
// Ties go to the lower object id in rule 1 and the higher in rule 2. The objects are then laid out
// contiguously (lay_out_shared_objects).
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "../idle_windows.h"
#include "../operator_profiles.h"
#include "../shared_objects.h"
#include "strategies.h"

namespace memoplan::planner {
namespace {

class ObjectPool {
 public:
  ObjectPool(const Problem& problem, const TickRanks& ranks)
      : problem_(problem), windows_(problem, ranks) {}

  const std::vector<size_t>& object_of() const { return windows_.object_of(); }

  // The window Algorithm 1 puts `block` in (rules 1 and 2), or object kNone (rule 3).
  //
  // Two ways to find it: walk the objects in size order from the block's size, checking each
  // (the first suitable one up is rule 1's pick, failing that the first one down is rule 2's); or
  // list the suitable objects through their windows and pick among them. The walk is long when
  // many objects near the block's size are busy (long-lived blocks), the listing when many objects
  // are free (the block is short-lived). Both advance in lockstep and the first to finish answers,
  // so a block costs O(log n) times the shorter of the two.
  Window choose(size_t block) const {
    const uint64_t size = problem_.blocks[block].size;
    auto up = by_size_.lower_bound({size, 0});
    auto down = std::make_reverse_iterator(up);
    bool walking_up = true;
    size_t slot = windows_.next_slot_around(block, 0);
    Window holding, growing;  // among the listed windows: rule 1's and rule 2's picks so far
    for (;;) {
      if (walking_up && up == by_size_.end()) walking_up = false;
      if (walking_up) {
        if (free_during(up->second, block)) return window_around(up->second, block);
        ++up;
      } else {
        if (down == by_size_.rend()) return {};
        if (free_during(down->second, block)) return window_around(down->second, block);
        ++down;
      }

      if (slot == IdleWindows::kNone) return holding.object != Window::kNone ? holding : growing;
      const Window w = windows_.at_start_slot(slot);
      const std::pair<uint64_t, size_t> key{size_[w.object], w.object};
      if (key.first >= size) {
        if (holding.object == Window::kNone || key < key_of(holding)) holding = w;
      } else if (growing.object == Window::kNone || key > key_of(growing)) {
        growing = w;
      }
      slot = windows_.next_slot_around(block, slot + 1);
    }
  }

  void open(size_t block) {
    const size_t object = windows_.open(block);
    busy_.emplace_back();
    size_.push_back(0);
    by_size_.insert({0, object});
    note(object, block);
  }

  void assign(const Window& w, size_t block) {
    windows_.assign(w, block);
    note(w.object, block);
  }

 private:
  std::pair<uint64_t, size_t> key_of(const Window& w) const { return {size_[w.object], w.object}; }

  void note(size_t object, size_t block) {
    const Block& b = problem_.blocks[block];
    busy_[object].emplace(b.begin, block);
    if (b.size > size_[object]) {
      by_size_.erase({size_[object], object});
      size_[object] = b.size;
      by_size_.insert({size_[object], object});
    }
  }

  // O(log n): only the object's blocks right before and right after `block` can overlap it,
  // because one object's blocks never overlap each other.
  bool free_during(size_t object, size_t block) const {
    const Block& b = problem_.blocks[block];
    const std::map<uint64_t, size_t>& busy = busy_[object];
    auto next = busy.lower_bound(b.begin);
    if (next != busy.end() && next->first < b.end) return false;
    return next == busy.begin() || problem_.blocks[std::prev(next)->second].end <= b.begin;
  }

  // The window of a suitable `object` that holds `block`.
  Window window_around(size_t object, size_t block) const {
    const std::map<uint64_t, size_t>& busy = busy_[object];
    auto next = busy.lower_bound(problem_.blocks[block].begin);
    return {object, next == busy.begin() ? Window::kNone : std::prev(next)->second,
            next == busy.end() ? Window::kNone : next->second};
  }

  const Problem& problem_;
  IdleWindows windows_;
  std::vector<std::map<uint64_t, size_t>> busy_;  // per object: begin -> block, in time order
  std::vector<uint64_t> size_;
  std::set<std::pair<uint64_t, size_t>> by_size_;  // (size, object)
};

}  // namespace

StrategyResult solve_shared_greedy_by_breadth(const Problem& problem, const StrategyOptions&) {
  const TickRanks ranks(problem);
  ObjectPool pool(problem, ranks);
  ProfileDrain unassigned_of(problem);
  std::vector<size_t> unassigned;
  for (const Operator& op : operators_by_breadth(problem)) {
    unassigned.clear();
    unassigned_of.take(op.tick, unassigned);
    for (size_t block : unassigned) {
      const Window w = pool.choose(block);
      if (w.object == Window::kNone) {
        pool.open(block);
      } else {
        pool.assign(w, block);
      }
    }
  }
  return {lay_out_shared_objects(problem, pool.object_of())};
}

}  // namespace memoplan::planner

// Pisarchyk & Lee 2020, §4.4: Greedy by Size Improved for shared objects. Blocks are assigned in
// stages set by the positional maxima p0 >= p1 >= ... (distinct values): sizes equal to p0, then
// sizes strictly between p0 and p1, then equal to p1, and so on, down to sizes below the last one.
// Within a stage the next assignment is the (block, suitable object) pair leaving the smallest time
// gap between the block and the object's nearest block before or after it; when no block of the
// stage fits any object, the stage's largest remaining block opens a new object. The objects are
// then laid out contiguously (lay_out_shared_objects).
//
// The objects' idle stretches are indexed by where they start and end (idle_windows.h), and the
// stage's waiting blocks by where they begin and end, so both "the closest window around this
// block" and "the closest block inside this window" are O(log n) queries. The closest pair is
// kept in a lazy priority queue, which makes a stage O(k log n) instead of O(k * objects * k).
#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <tuple>

#include "../dominance_tree.h"
#include "../idle_windows.h"
#include "../operator_profiles.h"
#include "../shared_objects.h"
#include "strategies.h"

namespace memoplan::planner {
namespace {

constexpr size_t kNone = DominanceTree::kNone;

// The current stage's unassigned blocks, searchable from a window: the earliest-beginning and the
// latest-ending block that fits in it.
class WaitingBlocks {
 public:
  WaitingBlocks(const Problem& problem, const TickRanks& ranks)
      : ranks_(ranks), by_begin_(problem.blocks.size()), by_end_(problem.blocks.size()) {
    const size_t n = problem.blocks.size();
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    // Among equal keys the last slot wins a query, so the block preferred on ties goes last.
    auto preferred_last = [&](size_t a, size_t b) { return larger_block_first(problem, b, a); };
    std::sort(order.begin(), order.end(), preferred_last);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranks.begin[a] > ranks.begin[b]; });
    place(order, begin_slot_, block_by_begin_, begin_keys_,
          [&](size_t i) { return -ranks.begin[i]; });
    std::sort(order.begin(), order.end(), preferred_last);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranks.end[a] < ranks.end[b]; });
    place(order, end_slot_, block_by_end_, end_keys_, [&](size_t i) { return ranks.end[i]; });
  }

  void add(size_t block) {
    by_begin_.set(begin_slot_[block], -ranks_.end[block]);
    by_end_.set(end_slot_[block], ranks_.begin[block]);
  }
  void remove(size_t block) {
    by_begin_.set(begin_slot_[block], DominanceTree::kEmpty);
    by_end_.set(end_slot_[block], DominanceTree::kEmpty);
  }

  // Waiting blocks living within ranks [start, end): the earliest-beginning one, or kNone.
  size_t earliest_begin_within(int64_t start, int64_t end) const {
    const size_t slot = by_begin_.last_at_least(upper(begin_keys_, -start), -end);
    return slot == kNone ? kNone : block_by_begin_[slot];
  }
  // ... and the latest-ending one.
  size_t latest_end_within(int64_t start, int64_t end) const {
    const size_t slot = by_end_.last_at_least(upper(end_keys_, end), start);
    return slot == kNone ? kNone : block_by_end_[slot];
  }

 private:
  template <typename Key>
  static void place(const std::vector<size_t>& order, std::vector<size_t>& slot_of,
                    std::vector<size_t>& block_at, std::vector<int64_t>& keys, Key key) {
    slot_of.resize(order.size());
    for (size_t p = 0; p < order.size(); ++p) {
      slot_of[order[p]] = p;
      keys.push_back(key(order[p]));
    }
    block_at = order;
  }
  static size_t upper(const std::vector<int64_t>& keys, int64_t key) {
    return std::upper_bound(keys.begin(), keys.end(), key) - keys.begin();
  }

  const TickRanks& ranks_;
  DominanceTree by_begin_;  // slots by descending begin; value: -end rank
  DominanceTree by_end_;    // slots by ascending end; value: begin rank
  std::vector<size_t> begin_slot_, end_slot_, block_by_begin_, block_by_end_;
  std::vector<int64_t> begin_keys_, end_keys_;
};

// A (block, window) pair that could be chosen next and the time gap it leaves.
struct Candidate {
  uint64_t gap = 0;
  uint64_t size = 0;
  size_t block = kNone;
  size_t start_slot = kNone;  // with end_rank: the window, as IdleWindows identifies it
  int64_t end_rank = 0;
  bool found_from_window = false;  // else found from the block

  // Smallest gap first; ties to the larger block, then the lower index, for determinism.
  auto priority() const {
    return std::make_tuple(gap, ~size, block, start_slot, found_from_window);
  }
};

struct AfterInPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.priority() > b.priority();
  }
};

// Runs the stages. The queue may hold stale candidates (their block assigned or their window split
// since); a stale one is re-derived when popped. Candidates only get worse as blocks are assigned,
// except through new windows, and every new window is searched for its best block as it appears,
// so the queue's first live candidate is always the stage's best pair.
class Assigner {
 public:
  Assigner(const Problem& problem, const TickRanks& ranks)
      : problem_(problem),
        ranks_(ranks),
        windows_(problem, ranks),
        waiting_(problem, ranks),
        assigned_(problem.blocks.size(), false) {}

  const std::vector<size_t>& object_of() const { return windows_.object_of(); }

  // `stage` in non-increasing size: the order in which blocks that fit nowhere open objects.
  void run_stage(const std::vector<size_t>& stage) {
    for (size_t block : stage) waiting_.add(block);
    for (size_t block : stage) push_best_window_for(block);
    size_t left = stage.size();
    size_t next_to_open = 0;
    while (left > 0) {
      if (queue_.empty()) {
        while (assigned_[stage[next_to_open]]) ++next_to_open;
        const size_t block = stage[next_to_open];
        const size_t object = windows_.open(block);
        settle(block);
        --left;
        push_best_block_for(windows_.before_first(object));
        push_best_block_for(windows_.after_last(object));
        continue;
      }
      const Candidate c = queue_.top();
      queue_.pop();
      const bool window_alive = windows_.alive(c.start_slot, c.end_rank);
      if (window_alive && !assigned_[c.block]) {
        const Window w = windows_.at_start_slot(c.start_slot);
        windows_.assign(w, c.block);
        settle(c.block);
        --left;
        push_best_block_for({w.object, w.left, c.block});
        push_best_block_for({w.object, c.block, w.right});
      } else if (!c.found_from_window && !assigned_[c.block]) {
        push_best_window_for(c.block);
      } else if (c.found_from_window && window_alive) {
        push_best_block_for(windows_.at_start_slot(c.start_slot));
      }
    }
    queue_ = {};  // whatever is left is stale
  }

 private:
  void settle(size_t block) {
    assigned_[block] = true;
    waiting_.remove(block);
  }

  Candidate candidate(size_t block, const Window& w, uint64_t gap, bool found_from_window) const {
    return {gap,
            problem_.blocks[block].size,
            block,
            windows_.start_slot(w),
            windows_.end_rank(w),
            found_from_window};
  }

  void push_better(const Candidate* a, const Candidate* b) {
    if (a && (!b || a->priority() <= b->priority())) {
      queue_.push(*a);
    } else if (b) {
      queue_.push(*b);
    }
  }

  void push_best_window_for(size_t block) {
    const Block& b = problem_.blocks[block];
    Candidate after_left, before_right;
    const Window latest = windows_.latest_start_around(block);
    if (latest.object != kNone) {
      after_left = candidate(block, latest, b.begin - problem_.blocks[latest.left].end, false);
    }
    const Window earliest = windows_.earliest_end_around(block);
    if (earliest.object != kNone) {
      before_right =
          candidate(block, earliest, problem_.blocks[earliest.right].begin - b.end, false);
    }
    push_better(latest.object != kNone ? &after_left : nullptr,
                earliest.object != kNone ? &before_right : nullptr);
  }

  void push_best_block_for(const Window& w) {
    const int64_t start = w.left == kNone ? 0 : ranks_.end[w.left];
    const int64_t end = windows_.end_rank(w);
    Candidate after_left, before_right;
    size_t first = kNone, last = kNone;
    if (w.left != kNone && (first = waiting_.earliest_begin_within(start, end)) != kNone) {
      const uint64_t gap = problem_.blocks[first].begin - problem_.blocks[w.left].end;
      after_left = candidate(first, w, gap, true);
    }
    if (w.right != kNone && (last = waiting_.latest_end_within(start, end)) != kNone) {
      const uint64_t gap = problem_.blocks[w.right].begin - problem_.blocks[last].end;
      before_right = candidate(last, w, gap, true);
    }
    push_better(first != kNone ? &after_left : nullptr, last != kNone ? &before_right : nullptr);
  }

  const Problem& problem_;
  const TickRanks& ranks_;
  IdleWindows windows_;
  WaitingBlocks waiting_;
  std::vector<bool> assigned_;
  std::priority_queue<Candidate, std::vector<Candidate>, AfterInPriority> queue_;
};

// The blocks of each stage, stages in order, each in non-increasing size. Stage 2j holds the sizes
// equal to the j-th distinct positional maximum, stage 2j - 1 those strictly between it and the
// previous one; a size below the last maximum falls in the stage after it (the paper's "etc.").
std::vector<std::vector<size_t>> stages(const Problem& problem) {
  std::vector<uint64_t> maxima = positional_maxima(problem);
  maxima.erase(std::unique(maxima.begin(), maxima.end()), maxima.end());
  std::vector<std::vector<size_t>> out(2 * maxima.size());
  std::vector<size_t> by_size(problem.blocks.size());
  std::iota(by_size.begin(), by_size.end(), size_t{0});
  std::sort(by_size.begin(), by_size.end(),
            [&](size_t a, size_t b) { return larger_block_first(problem, a, b); });
  for (size_t block : by_size) {
    const uint64_t size = problem.blocks[block].size;
    // The first maximum <= size; the largest block equals maxima[0], so none is bigger than it.
    const size_t j =
        std::lower_bound(maxima.begin(), maxima.end(), size, std::greater<>()) - maxima.begin();
    out[j < maxima.size() && maxima[j] == size ? 2 * j : 2 * j - 1].push_back(block);
  }
  return out;
}

}  // namespace

StrategyResult solve_shared_greedy_by_size_improved(const Problem& problem,
                                                    const StrategyOptions&) {
  const TickRanks ranks(problem);
  Assigner assigner(problem, ranks);
  for (const std::vector<size_t>& stage : stages(problem)) {
    if (!stage.empty()) assigner.run_stage(stage);
  }
  return {lay_out_shared_objects(problem, assigner.object_of())};
}

}  // namespace memoplan::planner

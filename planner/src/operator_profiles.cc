#include "operator_profiles.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace memoplan::planner {
namespace {

std::vector<size_t> indices_sorted_by(const Problem& problem, uint64_t Block::*key) {
  std::vector<size_t> order(problem.blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto& blocks = problem.blocks;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return blocks[a].*key < blocks[b].*key; });
  return order;
}

// Walks the distinct begin ticks in order, keeping the live set current: `on_free(i)` and
// `on_allocate(i)` see every block leave and enter it, `at_operator(tick)` runs once the live set
// is the profile of the operator at `tick`.
template <typename OnFree, typename OnAllocate, typename AtOperator>
void sweep(const Problem& problem, OnFree on_free, OnAllocate on_allocate, AtOperator at_operator) {
  const auto& blocks = problem.blocks;
  const std::vector<size_t> by_begin = indices_sorted_by(problem, &Block::begin);
  const std::vector<size_t> by_end = indices_sorted_by(problem, &Block::end);
  size_t next_end = 0;
  for (size_t k = 0; k < by_begin.size();) {
    const uint64_t tick = blocks[by_begin[k]].begin;
    // Half-open lifetimes: a block ending at `tick` is already gone when the new ones arrive.
    for (; next_end < by_end.size() && blocks[by_end[next_end]].end <= tick; ++next_end) {
      on_free(by_end[next_end]);
    }
    for (; k < by_begin.size() && blocks[by_begin[k]].begin == tick; ++k) on_allocate(by_begin[k]);
    at_operator(tick);
  }
}

// Range add of +1 over operator positions with the maximum over all of them; no push-down is
// needed because only the root's maximum is ever read.
class CoverCounter {
 public:
  explicit CoverCounter(size_t positions) {
    while (leaves_ < positions) leaves_ *= 2;
    max_.assign(2 * leaves_, 0);
    pending_.assign(2 * leaves_, 0);
  }
  void add_one(size_t lo, size_t hi) { add(1, 0, leaves_, lo, hi); }
  uint64_t max() const { return max_[1]; }

 private:
  void add(size_t node, size_t lo, size_t hi, size_t from, size_t to) {
    if (to <= lo || hi <= from) return;
    if (from <= lo && hi <= to) {
      ++max_[node];
      ++pending_[node];
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    add(2 * node, lo, mid, from, to);
    add(2 * node + 1, mid, hi, from, to);
    max_[node] = pending_[node] + std::max(max_[2 * node], max_[2 * node + 1]);
  }

  size_t leaves_ = 1;
  std::vector<uint64_t> max_;      // max cover in the subtree, counting this node's own adds
  std::vector<uint64_t> pending_;  // adds that covered this whole subtree
};

}  // namespace

std::vector<Operator> operators(const Problem& problem) {
  std::vector<Operator> out;
  uint64_t live = 0;
  sweep(
      problem, [&](size_t i) { live -= problem.blocks[i].size; },
      [&](size_t i) { live += problem.blocks[i].size; },
      [&](uint64_t tick) {
        out.push_back({tick, live});
      });
  return out;
}

std::vector<Operator> operators_by_breadth(const Problem& problem) {
  std::vector<Operator> out = operators(problem);
  std::stable_sort(out.begin(), out.end(),
                   [](const Operator& a, const Operator& b) { return a.breadth > b.breadth; });
  return out;
}

OperatorProfiles operator_profiles(const Problem& problem) {
  // The live set is kept as ranks in the global size order, so every profile comes out sorted
  // without sorting each one.
  std::vector<size_t> by_size(problem.blocks.size());
  std::iota(by_size.begin(), by_size.end(), size_t{0});
  std::sort(by_size.begin(), by_size.end(),
            [&](size_t a, size_t b) { return larger_block_first(problem, a, b); });
  std::vector<size_t> rank(by_size.size());
  for (size_t r = 0; r < by_size.size(); ++r) rank[by_size[r]] = r;

  OperatorProfiles out;
  out.first.push_back(0);
  std::set<size_t> live;
  uint64_t breadth = 0;
  sweep(
      problem,
      [&](size_t i) {
        live.erase(rank[i]);
        breadth -= problem.blocks[i].size;
      },
      [&](size_t i) {
        live.insert(rank[i]);
        breadth += problem.blocks[i].size;
      },
      [&](uint64_t tick) {
        out.operators.push_back({tick, breadth});
        for (size_t r : live) out.members.push_back(by_size[r]);
        out.first.push_back(out.members.size());
      });
  return out;
}

std::vector<uint64_t> positional_maxima(const Problem& problem) {
  std::vector<uint64_t> ticks;
  for (const Operator& op : operators(problem)) ticks.push_back(op.tick);
  std::vector<size_t> by_size(problem.blocks.size());
  std::iota(by_size.begin(), by_size.end(), size_t{0});
  std::sort(by_size.begin(), by_size.end(),
            [&](size_t a, size_t b) { return larger_block_first(problem, a, b); });

  CoverCounter cover(ticks.size());
  std::vector<uint64_t> maxima;
  for (size_t i : by_size) {
    const Block& b = problem.blocks[i];
    const size_t lo = std::lower_bound(ticks.begin(), ticks.end(), b.begin) - ticks.begin();
    const size_t hi = std::lower_bound(ticks.begin(), ticks.end(), b.end) - ticks.begin();
    cover.add_one(lo, hi);
    // Every block placed so far is at least this big, so an operator now holding k + 1 of them
    // has a (k+1)-th biggest block of at least this size, and no earlier block made it happen.
    while (maxima.size() < cover.max()) maxima.push_back(b.size);
  }
  return maxima;
}

ProfileDrain::ProfileDrain(const Problem& problem)
    : problem_(problem),
      by_begin_(indices_sorted_by(problem, &Block::begin)),
      untaken_(problem.blocks.size()) {
  for (size_t i : by_begin_) begins_.push_back(problem.blocks[i].begin);
  for (const Block& b : problem.blocks) ends_.push_back(b.end);
  std::sort(ends_.begin(), ends_.end());
  ends_.erase(std::unique(ends_.begin(), ends_.end()), ends_.end());
  for (size_t slot = 0; slot < by_begin_.size(); ++slot) {
    const uint64_t end = problem.blocks[by_begin_[slot]].end;
    untaken_.set(slot, std::lower_bound(ends_.begin(), ends_.end(), end) - ends_.begin());
  }
}

void ProfileDrain::take(uint64_t tick, std::vector<size_t>& out) {
  const size_t began = std::upper_bound(begins_.begin(), begins_.end(), tick) - begins_.begin();
  const int64_t ends_after = std::upper_bound(ends_.begin(), ends_.end(), tick) -
                             ends_.begin();  // rank of first end > tick
  const size_t first_new = out.size();
  untaken_.for_each_at_least(began, ends_after, [&](size_t slot) { out.push_back(slot); });
  for (size_t k = first_new; k < out.size(); ++k) {
    untaken_.set(out[k], DominanceTree::kEmpty);
    out[k] = by_begin_[out[k]];
  }
  std::sort(out.begin() + first_new, out.end(),
            [&](size_t a, size_t b) { return larger_block_first(problem_, a, b); });
}

}  // namespace memoplan::planner

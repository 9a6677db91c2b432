#include "order_moves.h"

#include <algorithm>

namespace memoplan::planner {
namespace {

// Share of moves made blind, away from the peak: enough to drift across plateaus of equal slab.
constexpr double kBlindChance = 0.15;

}  // namespace

OrderMoves::OrderMoves(const Problem& problem)
    : problem_(problem), position_(problem.blocks.size()) {}

void OrderMoves::set_current(const std::vector<size_t>& order, const std::vector<uint64_t>& offsets,
                             uint64_t slab) {
  order_ = &order;
  offsets_ = &offsets;
  for (size_t p = 0; p < order.size(); ++p) position_[order[p]] = p;
  peak_blocks_.clear();
  by_top_.clear();
  for (size_t i = 0; i < problem_.blocks.size(); ++i) {
    const uint64_t top = offsets[i] + problem_.blocks[i].size;
    if (top == slab) peak_blocks_.push_back(i);
    by_top_.emplace_back(top, i);
  }
  std::sort(by_top_.begin(), by_top_.end());
}

void OrderMoves::move_to(std::vector<size_t>& order, size_t from, size_t to) {
  if (from < to) {
    std::rotate(order.begin() + from, order.begin() + from + 1, order.begin() + to + 1);
  } else if (to < from) {
    std::rotate(order.begin() + to, order.begin() + from, order.begin() + from + 1);
  }
}

void OrderMoves::critical_chain(size_t peak, SearchRandom& random) {
  const std::vector<uint64_t>& offsets = *offsets_;
  chain_.assign(1, peak);
  for (size_t top = peak; offsets[top] > 0 && chain_.size() < problem_.blocks.size();) {
    const Block& block = problem_.blocks[top];
    // The blocks ending where this one starts, placed before it, whose lifetimes meet its own;
    // in index order (by_top_ sorts them so).
    neighbours_.clear();
    auto at = std::lower_bound(by_top_.begin(), by_top_.end(),
                               std::pair<uint64_t, size_t>(offsets[top], 0));
    for (; at != by_top_.end() && at->first == offsets[top]; ++at) {
      const size_t n = at->second;
      if (position_[n] < position_[top] && lifetimes_overlap(problem_.blocks[n], block)) {
        neighbours_.push_back(n);
      }
    }
    if (neighbours_.empty()) break;
    top = neighbours_[random.below(neighbours_.size())];
    chain_.push_back(top);
  }
}

void OrderMoves::perturb(SearchRandom& random, std::vector<size_t>& candidate) {
  candidate = *order_;
  if (candidate.size() < 2) return;
  if (peak_blocks_.empty() || random.chance(kBlindChance)) return blind_move(random, candidate);
  critical_chain(peak_blocks_[random.below(peak_blocks_.size())], random);
  if (chain_.size() < 2) return blind_move(random, candidate);
  // Undo one link of the chain: the upper block is decoded after the lower one, so decoding it
  // first (or the lower one after it) lets it take the place the lower one had.
  const size_t link = random.below(chain_.size() - 1);
  const size_t upper_at = position_[chain_[link]];
  const size_t lower_at = position_[chain_[link + 1]];
  const double kind = random.unit();
  if (kind < 0.4) {
    std::swap(candidate[upper_at], candidate[lower_at]);
  } else if (kind < 0.7) {
    move_to(candidate, upper_at, lower_at);
  } else {
    move_to(candidate, lower_at, upper_at);
  }
}

void OrderMoves::blind_move(SearchRandom& random, std::vector<size_t>& candidate) {
  const size_t n = candidate.size();
  const size_t from = random.below(n);
  const double kind = random.unit();
  if (kind < 0.5) {
    // Swap with a block a few positions away.
    const size_t distance = 1 + random.below(std::min<size_t>(n - 1, 8));
    std::swap(candidate[from], candidate[(from + distance) % n]);
  } else if (kind < 0.8) {
    move_to(candidate, from, random.below(n));
  } else {
    // Reverse a short segment.
    const size_t length = 2 + random.below(std::min<size_t>(n - 1, 15));
    const size_t first = random.below(n - length + 1);
    std::reverse(candidate.begin() + first, candidate.begin() + first + length);
  }
}

}  // namespace memoplan::planner

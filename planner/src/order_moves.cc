#include "order_moves.h"

#include <algorithm>

namespace memoplan::planner {
namespace {

// Share of moves made blind, away from the peak: enough to drift across plateaus of equal slab.
constexpr double kBlindChance = 0.15;

}  // namespace

OrderMoves::OrderMoves(const Problem& problem)
    : problem_(problem), every_block_(problem.blocks), position_(problem.blocks.size()) {
  for (size_t i = 0; i < problem.blocks.size(); ++i) every_block_.insert(i);
}

void OrderMoves::set_current(const std::vector<size_t>& order, const std::vector<uint64_t>& offsets,
                             uint64_t slab) {
  order_ = &order;
  offsets_ = &offsets;
  for (size_t p = 0; p < order.size(); ++p) position_[order[p]] = p;
  peak_blocks_.clear();
  for (size_t i = 0; i < problem_.blocks.size(); ++i) {
    if (offsets[i] + problem_.blocks[i].size == slab) peak_blocks_.push_back(i);
  }
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
    neighbours_.clear();
    every_block_.overlapping(block.begin, block.end, neighbours_);
    size_t kept = 0;
    for (size_t n : neighbours_) {
      if (offsets[n] + problem_.blocks[n].size == offsets[top] && position_[n] < position_[top]) {
        neighbours_[kept++] = n;
      }
    }
    if (kept == 0) break;
    top = neighbours_[random.below(kept)];
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

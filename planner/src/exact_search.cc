// See exact_search.h. The search state is a handful of flat arrays changed in place by each step
// and restored on the way back (floor changes on a trail), so a node allocates nothing.
#include "exact_search.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

namespace memoplan::planner {
namespace {

constexpr uint64_t kUnplaced = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
// A node scans its part's blocks, a few nanoseconds each: the clock is read every this many
// block visits' worth of nodes (about every 0.5 ms), every node on problems this large.
constexpr uint64_t kBlocksPerClockCheck = 65536;

}  // namespace

ExactSearch::ExactSearch(const Problem& problem, const TimeSections& sections)
    : problem_(problem),
      t_(sections),
      n_(problem.blocks.size()),
      clock_every_(std::max<uint64_t>(1, kBlocksPerClockCheck / std::max<size_t>(n_, 1))) {}

bool ExactSearch::out_of_budget() {
  ++nodes_;
  if (limits_.max_nodes && nodes_ > limits_.max_nodes) stopped_ = true;
  if (nodes_ % clock_every_ == 0 && std::chrono::steady_clock::now() >= limits_.deadline) {
    stopped_ = true;
  }
  return stopped_;
}

ExactOutcome ExactSearch::run(uint64_t capacity, const RankOrder& order,
                              const ExactSearchLimits& limits) {
  capacity_ = capacity;
  order_ = order;
  limits_ = limits;
  nodes_ = 0;
  stopped_ = false;
  const size_t sections = t_.sections();
  offset_.assign(n_, kUnplaced);
  floor_.assign(n_, 0);
  remaining_ = t_.load;
  crossing_.assign(sections, 0);
  for (size_t i = 0; i < n_; ++i) {
    for (uint32_t s = t_.first[i]; s + 1 < t_.last[i]; ++s) ++crossing_[s];
  }
  trail_.clear();
  rank_.assign(n_, 0);
  rank_trail_.clear();
  parts_.clear();
  candidates_.clear();
  solution_.assign(n_, 0);

  for (uint64_t load : t_.load) {
    if (load > capacity) return ExactOutcome::kInfeasible;
  }

  // Twins (one size, one run of sections) in index order, each after the one before it; their
  // rank keys are equal, so every ranking agrees.
  twin_before_.assign(n_, kNone);
  std::map<std::tuple<uint64_t, uint32_t, uint32_t>, uint32_t> last_twin;
  for (uint32_t i = 0; i < n_; ++i) {
    auto [it, fresh] = last_twin.try_emplace({problem_.blocks[i].size, t_.first[i], t_.last[i]}, i);
    if (!fresh) {
      twin_before_[i] = it->second;
      it->second = i;
    }
  }

  // The parts no block crosses between, each searched alone.
  for (uint32_t i = 0; i < n_; ++i) parts_.push_back(i);
  return search_parts(0, parts_.size(), 0, static_cast<uint32_t>(sections), kNone);
}

// Searches the blocks parts_[part_begin, part_end), living in sections [lo, hi), after `placed`
// was placed (kNone: at the start): split where no unplaced block crosses a boundary `placed`
// spanned, or at every such boundary at the start.
ExactOutcome ExactSearch::search_parts(size_t part_begin, size_t part_end, uint32_t lo, uint32_t hi,
                                       uint32_t placed) {
  std::vector<uint32_t> cuts;
  const uint32_t from = placed == kNone ? lo : t_.first[placed];
  const uint32_t to = placed == kNone ? hi : t_.last[placed];
  for (uint32_t s = from; s + 1 < to; ++s) {
    if (crossing_[s] == 0) cuts.push_back(s + 1);
  }
  if (cuts.empty() && placed != kNone) {
    return search(part_begin, part_end, lo, hi, offset_[placed], rank_[placed]);
  }
  cuts.insert(cuts.begin(), lo);
  cuts.push_back(hi);

  // Every unplaced block lies between two cuts: gather each side's blocks, then search each.
  const size_t stack_mark = parts_.size();
  std::vector<size_t> side_end(cuts.size() - 1);
  for (size_t side = 0; side + 1 < cuts.size(); ++side) {
    for (size_t k = part_begin; k < part_end; ++k) {
      const uint32_t b = parts_[k];
      if (offset_[b] == kUnplaced && t_.first[b] >= cuts[side] && t_.last[b] <= cuts[side + 1]) {
        parts_.push_back(b);
      }
    }
    side_end[side] = parts_.size();
  }
  const size_t rank_mark = rank_trail_.size();
  ExactOutcome outcome = ExactOutcome::kFound;
  size_t side_begin = stack_mark;
  for (size_t side = 0; side + 1 < cuts.size() && outcome == ExactOutcome::kFound; ++side) {
    if (side_end[side] > side_begin) {
      rank_part(side_begin, side_end[side]);
      outcome = search(side_begin, side_end[side], cuts[side], cuts[side + 1], 0, 0);
    }
    side_begin = side_end[side];
  }
  while (rank_trail_.size() > rank_mark) {
    rank_[rank_trail_.back().block] = rank_trail_.back().rank;
    rank_trail_.pop_back();
  }
  parts_.resize(stack_mark);
  return outcome;
}

// Ranks the blocks parts_[part_begin, part_end) by order_, saving their old ranks on rank_trail_.
void ExactSearch::rank_part(size_t part_begin, size_t part_end) {
  rank_keys_.clear();
  for (size_t k = part_begin; k < part_end; ++k) {
    const uint32_t b = parts_[k];
    const Block& block = problem_.blocks[b];
    std::array<uint64_t, 3> key{};
    for (size_t i = 0; i < order_.size(); ++i) {
      switch (order_[i]) {
        case RankKey::kSectionLoad:
          for (uint32_t s = t_.first[b]; s < t_.last[b]; ++s) {
            key[i] = std::max(key[i], remaining_[s]);
          }
          break;
        case RankKey::kLifetime:
          key[i] = block.end - block.begin;
          break;
        case RankKey::kArea: {
          const uint64_t lifetime = block.end - block.begin;
          const uint64_t most = std::numeric_limits<uint64_t>::max();
          key[i] = block.size > most / lifetime ? most : block.size * lifetime;
          break;
        }
        case RankKey::kSize:
          key[i] = block.size;
          break;
      }
    }
    rank_keys_.push_back({key, b});
  }
  std::sort(rank_keys_.begin(), rank_keys_.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  for (uint32_t r = 0; r < rank_keys_.size(); ++r) {
    const uint32_t b = rank_keys_[r].second;
    rank_trail_.push_back({b, rank_[b]});
    rank_[b] = r;
  }
}

ExactOutcome ExactSearch::search(size_t part_begin, size_t part_end, uint32_t lo, uint32_t hi,
                                 uint64_t last_offset, uint32_t last_rank) {
  if (out_of_budget()) return ExactOutcome::kStopped;
  const std::vector<uint32_t>& rank = rank_;
  const auto before_last = [&](uint32_t b) {
    return floor_[b] < last_offset || (floor_[b] == last_offset && rank[b] < last_rank);
  };

  uint64_t lowest_top = kUnplaced;
  for (size_t k = part_begin; k < part_end; ++k) {
    const uint32_t b = parts_[k];
    if (offset_[b] == kUnplaced) {
      lowest_top = std::min(lowest_top, floor_[b] + problem_.blocks[b].size);
    }
  }
  if (lowest_top == kUnplaced) return ExactOutcome::kFound;  // nothing left to place

  const size_t candidates_begin = candidates_.size();
  for (size_t k = part_begin; k < part_end; ++k) {
    const uint32_t b = parts_[k];
    if (offset_[b] != kUnplaced || floor_[b] >= lowest_top || before_last(b)) continue;
    if (twin_before_[b] != kNone && offset_[twin_before_[b]] == kUnplaced) continue;
    candidates_.push_back(b);
  }
  std::sort(candidates_.begin() + static_cast<std::ptrdiff_t>(candidates_begin), candidates_.end(),
            [&](uint32_t a, uint32_t b) {
              return floor_[a] != floor_[b] ? floor_[a] < floor_[b] : rank[a] < rank[b];
            });
  const size_t candidates_end = candidates_.size();

  // Below this offset, every section of the part holds its unplaced bytes above any step; above
  // it, stacks_fit() checks, with the fullest sections left and right of each point.
  uint64_t fullest = 0;
  for (uint32_t s = lo; s < hi; ++s) fullest = std::max(fullest, remaining_[s]);
  const uint64_t stack_free_below = capacity_ - fullest;
  const size_t fullest_mark = fullest_left_.size();

  ExactOutcome outcome = ExactOutcome::kInfeasible;
  for (size_t c = candidates_begin; c < candidates_end; ++c) {
    const uint32_t a = candidates_[c];
    const uint64_t offset = floor_[a];
    bool capped = false;
    if (offset > stack_free_below) {
      if (fullest_left_.size() == fullest_mark) fullest_around(lo, hi);
      if (!stacks_fit(fullest_mark, lo, hi, a, offset)) {
        if (is_capped(a)) break;
        continue;
      }
    }
    const size_t trail_mark = trail_.size();
    uint32_t from = t_.first[a], to = t_.last[a];
    ExactOutcome tried = ExactOutcome::kInfeasible;
    if (place(a, offset, capped, from, to) && floors_fit(from, to)) {
      tried = search_parts(part_begin, part_end, lo, hi, a);
    }
    unplace(a, trail_mark);
    if (tried == ExactOutcome::kFound) solution_[a] = offset;
    if (tried != ExactOutcome::kInfeasible) {
      outcome = tried;
      break;
    }
    if (capped) break;
  }
  candidates_.resize(candidates_begin);
  fullest_left_.resize(fullest_mark);
  fullest_right_.resize(fullest_mark);
  return outcome;
}

// Places `block` at `offset` and raises its unplaced neighbours' floors. False when one of them
// no longer fits under the capacity. `capped`: no unplaced neighbour. [from, to) grows to cover
// every section whose lowest floor may have risen.
bool ExactSearch::place(uint32_t block, uint64_t offset, bool& capped, uint32_t& from,
                        uint32_t& to) {
  const uint64_t size = problem_.blocks[block].size;
  offset_[block] = offset;
  for (uint32_t s = t_.first[block]; s < t_.last[block]; ++s) remaining_[s] -= size;
  for (uint32_t s = t_.first[block]; s + 1 < t_.last[block]; ++s) --crossing_[s];
  const uint64_t top = offset + size;
  bool fits = true;
  capped = true;
  for (uint32_t k = t_.neighbour_begin[block]; k < t_.neighbour_begin[block + 1]; ++k) {
    const uint32_t j = t_.neighbours[k];
    if (offset_[j] != kUnplaced) continue;
    capped = false;
    if (floor_[j] >= top) continue;
    trail_.push_back({j, floor_[j]});
    floor_[j] = top;
    if (top + problem_.blocks[j].size > capacity_) fits = false;
    from = std::min(from, t_.first[j]);
    to = std::max(to, t_.last[j]);
  }
  return fits;
}

void ExactSearch::unplace(uint32_t block, size_t trail_mark) {
  while (trail_.size() > trail_mark) {
    floor_[trail_.back().block] = trail_.back().floor;
    trail_.pop_back();
  }
  const uint64_t size = problem_.blocks[block].size;
  offset_[block] = kUnplaced;
  for (uint32_t s = t_.first[block]; s < t_.last[block]; ++s) remaining_[s] += size;
  for (uint32_t s = t_.first[block]; s + 1 < t_.last[block]; ++s) ++crossing_[s];
}

// Pushes the fullest section of [lo, s] and of [s, hi) for every s in [lo, hi) on
// fullest_left_/fullest_right_, for stacks_fit() at this node.
void ExactSearch::fullest_around(uint32_t lo, uint32_t hi) {
  const size_t mark = fullest_left_.size();
  const size_t width = hi - lo;
  fullest_left_.resize(mark + width);
  fullest_right_.resize(mark + width);
  uint64_t most = 0;
  for (size_t i = 0; i < width; ++i)
    fullest_left_[mark + i] = most = std::max(most, remaining_[lo + i]);
  most = 0;
  for (size_t i = width; i-- > 0;)
    fullest_right_[mark + i] = most = std::max(most, remaining_[lo + i]);
}

// Whether every section of [lo, hi) holds its unplaced bytes, once `block` is placed, stacked above
// `offset`: no later step goes lower. `mark`: where fullest_around(lo, hi) put this node's maxima.
bool ExactSearch::stacks_fit(size_t mark, uint32_t lo, uint32_t hi, uint32_t block,
                             uint64_t offset) const {
  const uint64_t room = capacity_ - offset;
  const uint32_t first = t_.first[block], last = t_.last[block];
  if (first > lo && fullest_left_[mark + (first - 1 - lo)] > room) return false;
  if (last < hi && fullest_right_[mark + (last - lo)] > room) return false;
  const uint64_t size = problem_.blocks[block].size;
  for (uint32_t s = first; s < last; ++s) {
    if (remaining_[s] - size > room) return false;
  }
  return true;
}

bool ExactSearch::is_capped(uint32_t block) const {
  for (uint32_t k = t_.neighbour_begin[block]; k < t_.neighbour_begin[block + 1]; ++k) {
    if (offset_[t_.neighbours[k]] == kUnplaced) return false;
  }
  return true;
}

// Whether every section of [from, to) holds its unplaced bytes stacked above their lowest floor.
bool ExactSearch::floors_fit(uint32_t from, uint32_t to) const {
  for (uint32_t s = from; s < to; ++s) {
    const uint64_t remaining = remaining_[s];
    if (remaining == 0) continue;
    // Some unplaced member must have its floor at most capacity - remaining.
    const uint64_t highest_floor = capacity_ - remaining;
    bool fits = false;
    for (uint32_t k = t_.member_begin[s]; k < t_.member_begin[s + 1] && !fits; ++k) {
      const uint32_t b = t_.members[k];
      fits = offset_[b] == kUnplaced && floor_[b] <= highest_floor;
    }
    if (!fits) return false;
  }
  return true;
}

}  // namespace memoplan::planner

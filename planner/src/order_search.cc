#include "order_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "order_decoder.h"
#include "order_moves.h"

namespace memoplan::planner {
namespace {

using Clock = std::chrono::steady_clock;

// Work units (see decode_work) an ordinary core decodes per second, with room to spare: the
// iteration cap derived from it should stop the search a little before the time limit does, so
// runs are reproducible, yet leave little of the budget unused.
constexpr double kWorkPerSecond = 4e7;
constexpr uint64_t kTreeWorkPerBlock = 100;

// Annealing at a fixed temperature: a worse plan is accepted when its slab exceeds the current one
// by less than kTemperature * slab times an Exp(1) draw, so by half a percent at most, typically.
constexpr double kTemperature = 0.005;
// After this many orders without a new best plan, resume from the best plan: the walk has
// drifted somewhere the remaining budget is better not spent.
constexpr uint64_t kRestartAfter = 100;
// Iterated local search: a restart that follows fruitless ones first accepts up to this many moves
// unconditionally, so it explores a different basin instead of re-walking the best plan's.
constexpr uint64_t kMaxKicks = 8;
// Decoding by the other fit rule is a large move; rare, but it escapes orders where lowest-fit
// strands a block that best-fit would tuck into a tight gap (and vice versa).
constexpr double kFlipFitChance = 0.02;

struct SearchState {
  std::vector<size_t> order;
  Fit fit = Fit::kFirst;
  std::vector<uint64_t> offsets;
  uint64_t slab = 0;
  // Block bytes above the target line, summed. Among plans with one slab size, the one with less
  // above the line is closer to a lower slab: this turns the plateaus into slopes.
  uint64_t excess = 0;
};

uint64_t excess_above(const Problem& problem, const std::vector<uint64_t>& offsets, uint64_t line) {
  uint64_t excess = 0;
  for (size_t i = 0; i < problem.blocks.size(); ++i) {
    const uint64_t top = offsets[i] + problem.blocks[i].size;
    if (top > line) excess += top - std::max(line, offsets[i]);
  }
  return excess;
}

// The cost of decoding one order, in the units OffsetPlacer spends: a placement plus a visit of
// each block whose lifetime overlaps (dense traces are the expensive ones). Counted by binary
// search, not by visiting them, so the estimate stays cheap where decoding is not.
uint64_t decode_work(const Problem& problem) {
  // Decoded with OccupancyTree (order_decoder.h): about 2.5 us a block on IOPDDL's Y_1, 1.7 on S_1
  // (bench/planner_scaling.cc), 100 units at kWorkPerSecond.
  if (places_with_tree(problem)) return problem.blocks.size() * kTreeWorkPerBlock;
  std::vector<uint64_t> begins, ends;
  for (const Block& block : problem.blocks) {
    begins.push_back(block.begin);
    ends.push_back(block.end);
  }
  std::sort(begins.begin(), begins.end());
  std::sort(ends.begin(), ends.end());
  uint64_t work = 0;
  for (const Block& block : problem.blocks) {
    // Those beginning before it ends, less those ending before it begins (which began earlier
    // still); the block itself is among them, the placement's own unit.
    const auto begun = std::lower_bound(begins.begin(), begins.end(), block.end) - begins.begin();
    const auto gone = std::upper_bound(ends.begin(), ends.end(), block.begin) - ends.begin();
    work += static_cast<uint64_t>(begun - gone);
  }
  return work;
}

class OrderSearch {
 public:
  OrderSearch(const Problem& problem, const OrderSearchOptions& options)
      : problem_(problem),
        options_(options),
        decoder_(problem),
        moves_(problem),
        random_(options.seed) {}

  OrderSearchResult run(const std::vector<uint64_t>& start) {
    result_.offsets = start;
    result_.slab = slab_size(problem_, start);
    if (problem_.blocks.size() < 2 || result_.slab <= options_.target_slab) return result_;
    // Decoding by offset order places no block higher than `start` does: no worse a plan.
    best_order_ = order_by_offset(problem_, start);
    if (!restart_from_best()) return result_;
    result_.slab = current_.slab;
    result_.offsets = current_.offsets;

    const uint64_t cap = options_.max_iterations ? options_.max_iterations : UINT64_MAX;
    std::vector<size_t> candidate;
    uint64_t since_best = 0;
    uint64_t failed_restarts = 0;
    while (result_.slab > options_.target_slab && result_.iterations < cap) {
      if (Clock::now() >= options_.deadline) {
        result_.hit_deadline = true;
        break;
      }
      ++result_.iterations;
      moves_.perturb(random_, candidate);
      const Fit fit = random_.chance(kFlipFitChance) ? other(current_.fit) : current_.fit;
      // The acceptance threshold is drawn before decoding, so a decode can stop at it.
      const double slack =
          kTemperature * static_cast<double>(current_.slab) * -std::log1p(-random_.unit());
      const uint64_t limit =
          kicks_left_ ? UINT64_MAX : current_.slab + static_cast<uint64_t>(slack);
      const Decoded decoded = decoder_.try_order(candidate, fit, limit, options_.deadline);
      if (decoded == Decoded::kOutOfTime) {
        result_.hit_deadline = true;
        break;
      }
      if (decoded == Decoded::kComplete && consider(candidate, fit)) {
        since_best = 0;
        failed_restarts = 0;
      }
      if (++since_best >= kRestartAfter) {
        since_best = 0;
        if (!restart_from_best()) break;
        // Each restart that found nothing better kicks the next one further from the best plan.
        kicks_left_ = std::min<uint64_t>(failed_restarts++, kMaxKicks);
      }
    }
    return result_;
  }

 private:
  static Fit other(Fit fit) { return fit == Fit::kFirst ? Fit::kBest : Fit::kFirst; }

  // Accepts the decoder's last plan if it is no worse (or within the drawn slack, already checked
  // by the decoder's limit). Returns whether it is a new best.
  bool consider(std::vector<size_t>& candidate, Fit fit) {
    const uint64_t slab = decoder_.slab();
    const uint64_t excess = excess_above(problem_, decoder_.offsets(), options_.target_slab);
    if (kicks_left_) {
      --kicks_left_;
    } else if (slab == current_.slab && excess > current_.excess) {
      return false;
    }
    decoder_.accept(candidate);
    std::swap(current_.order, candidate);
    current_.fit = fit;
    current_.offsets = decoder_.offsets();
    current_.slab = slab;
    current_.excess = excess;
    moves_.set_current(current_.order, current_.offsets, current_.slab);
    if (slab >= result_.slab) return false;
    result_.slab = slab;
    result_.offsets = current_.offsets;
    best_order_ = current_.order;
    best_fit_ = current_.fit;
    return true;
  }

  bool restart_from_best() {
    current_.order = best_order_;
    current_.fit = best_fit_;
    if (decoder_.reset(current_.order, current_.fit, options_.deadline) != Decoded::kComplete) {
      result_.hit_deadline = true;
      return false;
    }
    ++result_.iterations;
    current_.offsets = decoder_.offsets();
    current_.slab = decoder_.slab();
    current_.excess = excess_above(problem_, current_.offsets, options_.target_slab);
    moves_.set_current(current_.order, current_.offsets, current_.slab);
    return true;
  }

  const Problem& problem_;
  const OrderSearchOptions& options_;
  OrderDecoder decoder_;
  OrderMoves moves_;
  SearchRandom random_;
  SearchState current_;
  std::vector<size_t> best_order_;
  Fit best_fit_ = Fit::kFirst;
  uint64_t kicks_left_ = 0;  // moves still to accept unconditionally after a restart
  OrderSearchResult result_;
};

}  // namespace

uint64_t order_search_iterations(const Problem& problem, double seconds) {
  const double work = static_cast<double>(std::max<uint64_t>(decode_work(problem), 1));
  return std::max<uint64_t>(1, static_cast<uint64_t>(seconds * kWorkPerSecond / work));
}

std::vector<size_t> order_by_offset(const Problem& problem, const std::vector<uint64_t>& offsets) {
  std::vector<size_t> order(problem.blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto& b = problem.blocks;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (offsets[x] != offsets[y]) return offsets[x] < offsets[y];
    if (b[x].size != b[y].size) return b[x].size > b[y].size;
    return x < y;
  });
  return order;
}

OrderSearchResult search_placement_orders(const Problem& problem,
                                          const std::vector<uint64_t>& start,
                                          const OrderSearchOptions& options) {
  return OrderSearch(problem, options).run(start);
}

}  // namespace memoplan::planner

#include "order_decoder.h"

#include <algorithm>

#include "occupancy_tree.h"

namespace memoplan::planner {
namespace {

using Clock = std::chrono::steady_clock;

// Each checkpoint costs a placer copy (about 64 bytes a block) on every decode that passes it;
// beyond about 16 the copies cost more than the re-placing they save (measured).
constexpr size_t kMaxCheckpoints = 16;
constexpr size_t kCheckpointBytes = size_t{48} << 20;  // both sets together
constexpr size_t kPlacerBytesPerBlock = 64;

}  // namespace

OrderDecoder::OrderDecoder(const Problem& problem)
    : problem_(problem), with_tree_(places_with_tree(problem)) {
  if (with_tree_) return;
  const size_t n = std::max<size_t>(problem.blocks.size(), 1);
  const size_t affordable = kCheckpointBytes / (2 * kPlacerBytesPerBlock * n);
  const size_t wanted = std::clamp<size_t>(affordable, 1, kMaxCheckpoints);
  stride_ = (n + wanted - 1) / wanted;
  const size_t count = (n + stride_ - 1) / stride_;
  checkpoints_.resize(count);
  candidate_checkpoints_.resize(count);
  checkpoints_[0] = std::make_unique<OffsetPlacer>(problem);
}

Decoded OrderDecoder::reset(const std::vector<size_t>& order, Fit fit,
                            std::chrono::steady_clock::time_point deadline) {
  const Decoded decoded = run(order, fit, 0, UINT64_MAX, deadline);
  if (decoded == Decoded::kComplete) accept(order);
  return decoded;
}

Decoded OrderDecoder::try_order(const std::vector<size_t>& order, Fit fit, uint64_t limit,
                                std::chrono::steady_clock::time_point deadline) {
  size_t first_changed = 0;
  if (fit == current_fit_ && current_order_.size() == order.size()) {
    first_changed = static_cast<size_t>(
        std::mismatch(order.begin(), order.end(), current_order_.begin()).first - order.begin());
  }
  return run(order, fit, first_changed, limit, deadline);
}

Decoded OrderDecoder::run(const std::vector<size_t>& order, Fit fit, size_t first_changed,
                          uint64_t limit, std::chrono::steady_clock::time_point deadline) {
  if (with_tree_) return run_with_tree(order, fit, limit, deadline);
  const size_t n = order.size();
  const size_t resume = std::min(first_changed / stride_, checkpoints_.size() - 1);
  candidate_from_ = resume;
  candidate_fit_ = fit;
  OffsetPlacer placer(*checkpoints_[resume]);
  if (placer.extent() > limit) return Decoded::kAboveLimit;
  for (size_t position = resume * stride_; position < n; ++position) {
    if (position % stride_ == 0 && position / stride_ > resume) {
      candidate_checkpoints_[position / stride_] = std::make_unique<OffsetPlacer>(placer);
    }
    placer.place(order[position], fit);
    if (placer.extent() > limit) return Decoded::kAboveLimit;
    // A clock read costs about a placement's tenth; on dense traces 64 placements take a while.
    if ((position & 63) == 63 && Clock::now() >= deadline) return Decoded::kOutOfTime;
  }
  slab_ = placer.extent();
  offsets_ = placer.take_offsets();
  return Decoded::kComplete;
}

Decoded OrderDecoder::run_with_tree(const std::vector<size_t>& order, Fit fit, uint64_t limit,
                                    std::chrono::steady_clock::time_point deadline) {
  candidate_fit_ = fit;
  OccupancyTree tree(problem_, order);
  uint64_t extent = 0;
  for (size_t position = 0; position < order.size(); ++position) {
    const uint64_t offset = tree.place_next(fit);
    extent = std::max(extent, offset + problem_.blocks[order[position]].size);
    if (extent > limit) return Decoded::kAboveLimit;
    if ((position & 63) == 63 && Clock::now() >= deadline) return Decoded::kOutOfTime;
  }
  slab_ = extent;
  offsets_ = tree.take_offsets();
  return Decoded::kComplete;
}

void OrderDecoder::accept(const std::vector<size_t>& order) {
  current_order_ = order;
  current_fit_ = candidate_fit_;
  for (size_t k = candidate_from_ + 1; k < checkpoints_.size(); ++k) {
    std::swap(checkpoints_[k], candidate_checkpoints_[k]);
  }
}

}  // namespace memoplan::planner

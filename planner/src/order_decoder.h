// Decodes placement orders into plans for the order search (order_search.h), re-placing only what
// a change can affect.
//
// The search tries thousands of orders that each differ from the current one in a few positions.
// Blocks before the first changed position are placed exactly as before, so the decoder keeps
// copies of the placer partway through the current order (checkpoints) and resumes from the last
// one before the change. Copying a placer is a memcpy, while placing a block queries and sorts its
// neighbours: on random DNN-like traces this makes the search 1.2-1.5x faster.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "memoplan/planner/problem.h"
#include "offset_placer.h"

namespace memoplan::planner {

enum class Decoded {
  kComplete,
  kAboveLimit,  // the slab passed the caller's limit; the decode stopped there
  kOutOfTime,   // the deadline passed mid-decode
};

class OrderDecoder {
 public:
  explicit OrderDecoder(const Problem& problem);

  // Decodes `order` from scratch and makes it the current order.
  Decoded reset(const std::vector<size_t>& order, Fit fit,
                std::chrono::steady_clock::time_point deadline);

  // Decodes `order` (a permutation of the blocks) as a candidate, resuming from the current
  // order's last checkpoint before their first difference. Stops early once the slab exceeds
  // `limit`.
  Decoded try_order(const std::vector<size_t>& order, Fit fit, uint64_t limit,
                    std::chrono::steady_clock::time_point deadline);

  // The last complete candidate (or reset) decode.
  const std::vector<uint64_t>& offsets() const { return offsets_; }
  uint64_t slab() const { return slab_; }

  // Makes the last complete candidate the current order, keeping its checkpoints.
  void accept(const std::vector<size_t>& order);

 private:
  Decoded run(const std::vector<size_t>& order, Fit fit, size_t first_changed, uint64_t limit,
              std::chrono::steady_clock::time_point deadline);

  // Where many blocks are live at once (places_with_tree), every order is decoded from scratch
  // with OccupancyTree: no checkpoints (a tree is not cheap to copy), and a decode is still 10-50x
  // faster than resuming OffsetPlacer halfway.
  Decoded run_with_tree(const std::vector<size_t>& order, Fit fit, uint64_t limit,
                        std::chrono::steady_clock::time_point deadline);

  const Problem& problem_;
  bool with_tree_ = false;
  size_t stride_ = 1;  // positions between checkpoints
  // checkpoints_[k]: the placer after the current order's first k * stride_ blocks; [0] is empty.
  std::vector<std::unique_ptr<OffsetPlacer>> checkpoints_;
  std::vector<std::unique_ptr<OffsetPlacer>> candidate_checkpoints_;
  size_t candidate_from_ = 0;  // candidate_checkpoints_[k] is valid for k > candidate_from_
  std::vector<size_t> current_order_;
  Fit current_fit_ = Fit::kFirst;
  Fit candidate_fit_ = Fit::kFirst;
  std::vector<uint64_t> offsets_;
  uint64_t slab_ = 0;
};

}  // namespace memoplan::planner

// The perturbations the order search (order_search.h) applies to a placement order.
//
// In a decoded plan every block sits at 0 or directly on a block placed before it whose lifetime
// meets its own. Following that down from a block at the slab top gives a critical chain (like a
// critical path in job-shop scheduling): the slab is the chain's total size, and no move that
// leaves every link intact can lower it. So most moves undo one link of a random critical chain;
// the rest are small blind perturbations that let the search drift across plateaus of equal slab.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

// Seeded randomness that reads the same on every standard library: mt19937_64's output is fixed
// by the standard, its distributions are not.
class SearchRandom {
 public:
  explicit SearchRandom(uint64_t seed) : engine_(seed) {}
  size_t below(size_t n) { return static_cast<size_t>(engine_() % n); }       // n > 0
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  bool chance(double p) { return unit() < p; }

 private:
  std::mt19937_64 engine_;
};

class OrderMoves {
 public:
  explicit OrderMoves(const Problem& problem);

  // The plan the next perturbations start from: `order` decoded into `offsets` with top `slab`.
  void set_current(const std::vector<size_t>& order, const std::vector<uint64_t>& offsets,
                   uint64_t slab);

  // Writes into `candidate` the current order changed by one random move.
  void perturb(SearchRandom& random, std::vector<size_t>& candidate);

 private:
  // Moves the block at position `from` to position `to`, shifting those between by one.
  static void move_to(std::vector<size_t>& order, size_t from, size_t to);
  // Fills chain_ with a critical path down from `peak`: each block rests directly on the next
  // (its offset is the next one's end, their lifetimes meet), the last one at offset 0 (or with
  // nothing directly beneath it). The slab is the chain's total size; a lower slab must break it.
  void critical_chain(size_t peak, SearchRandom& random);
  void blind_move(SearchRandom& random, std::vector<size_t>& candidate);

  const Problem& problem_;
  // Every block as (offset + size, index) in the current plan, sorted: the blocks a block can rest
  // on directly are those ending at its offset. (Listing every block whose lifetime meets it
  // instead cost most of the search's time on traces with thousands live at once.)
  std::vector<std::pair<uint64_t, size_t>> by_top_;
  const std::vector<size_t>* order_ = nullptr;
  const std::vector<uint64_t>* offsets_ = nullptr;
  std::vector<size_t> position_;     // position_[block] = its index in *order_
  std::vector<size_t> peak_blocks_;  // those ending at the slab top
  std::vector<size_t> chain_;
  std::vector<size_t> neighbours_;  // scratch
};

}  // namespace memoplan::planner

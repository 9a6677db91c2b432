// Finds the already-placed blocks whose lifetimes overlap a query lifetime.
//
// Every offset strategy asks this once per block, so it decides planning speed (greedy_by_size must
// plan 100,000 allocations in well under 100 ms). An O(n) scan over all placed blocks makes
// planning O(n^2); a balanced interval tree costs O(k log n) per query with k overlapping blocks,
// and the log factor of pointer-chasing dominated the profile. Lifetimes are all known up front,
// so the time axis is cut into fixed-width buckets and a placed block is listed in every bucket it
// touches. A query scans the buckets it touches; each block is reported once, from the bucket
// where its overlap with the query begins. The bucket width adapts to the trace: wide enough that
// the lists hold at most a few entries per block in total, narrow enough that a typical query
// touches one or two buckets. Cost per query: O(entries in the touched buckets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

class LiveIntervalIndex {
 public:
  explicit LiveIntervalIndex(const std::vector<Block>& blocks);

  // Marks block `index` (into the constructor's vector) as placed.
  void insert(size_t index);

  // Appends to `out` the index of every placed block whose lifetime overlaps [begin, end).
  void overlapping(uint64_t begin, uint64_t end, std::vector<size_t>& out) const;

 private:
  size_t bucket_of(uint64_t time) const;

  const std::vector<Block>& blocks_;
  uint64_t origin_ = 0;       // earliest begin
  unsigned width_shift_ = 0;  // bucket width is 1 << width_shift_ ticks
  std::vector<std::vector<uint32_t>> buckets_;
};

}  // namespace memoplan::planner

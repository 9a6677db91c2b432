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
#include <utility>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

class LiveIntervalIndex {
 public:
  explicit LiveIntervalIndex(const std::vector<Block>& blocks);

  // Marks block `index` (into the constructor's vector) as placed at addresses [lo, hi).
  void insert(size_t index, uint64_t lo = 0, uint64_t hi = 0);

  // Appends to `out` the index of every placed block whose lifetime overlaps [begin, end).
  void overlapping(uint64_t begin, uint64_t end, std::vector<size_t>& out) const;
  // Appends the address ranges [lo, hi) of the same blocks.
  void overlapping_ranges(uint64_t begin, uint64_t end,
                          std::vector<std::pair<uint64_t, uint64_t>>& out) const;

 private:
  // A bucket entry carries everything a query reads, so a query streams through its buckets
  // instead of chasing block indices across memory (at 100k blocks, cache misses on those reads
  // cost more than everything else together).
  struct Entry {
    uint64_t begin, end, lo, hi;
    uint32_t index;
  };
  size_t bucket_of(uint64_t time) const;
  template <typename Visit>
  void for_each_overlapping(uint64_t begin, uint64_t end, Visit&& visit) const;

  const std::vector<Block>& blocks_;
  uint64_t origin_ = 0;         // earliest begin
  unsigned width_shift_ = 0;    // bucket width is 1 << width_shift_ ticks
  std::vector<Entry> entries_;  // bucket b holds entries_[bucket_start_[b], bucket_fill_[b])
  std::vector<uint64_t> bucket_start_;  // one past the end: the total
  std::vector<uint64_t> bucket_fill_;
  // Blocks touching more than kLongSpan buckets (pass-long outputs, caches) are not copied into
  // every bucket; each query checks them directly. There are few, and copies would cost more.
  std::vector<Entry> long_entries_;
};

}  // namespace memoplan::planner

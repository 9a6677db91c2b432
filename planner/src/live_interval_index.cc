#include "live_interval_index.h"

#include <algorithm>

namespace memoplan::planner {
namespace {

constexpr uint64_t kLongSpan = 32;  // blocks spanning more buckets go to the long list

uint64_t span_of(const Block& b, uint64_t origin, unsigned shift) {
  return ((b.end - 1 - origin) >> shift) - ((b.begin - origin) >> shift) + 1;
}

// Total bucket entries with buckets 2^shift ticks wide (long blocks are listed once).
uint64_t entries_for(const std::vector<Block>& blocks, uint64_t origin, unsigned shift) {
  uint64_t entries = 0;
  for (const Block& b : blocks) {
    const uint64_t span = span_of(b, origin, shift);
    entries += span > kLongSpan ? 1 : span;
  }
  return entries;
}

}  // namespace

LiveIntervalIndex::LiveIntervalIndex(const std::vector<Block>& blocks) : blocks_(blocks) {
  if (blocks.empty()) return;
  uint64_t horizon = 0;
  origin_ = blocks.front().begin;
  for (const Block& b : blocks) {
    origin_ = std::min(origin_, b.begin);
    horizon = std::max(horizon, b.end);
  }
  // Start at the median lifetime (most queries then touch one or two buckets) and widen until the
  // long-lived blocks' copies stay within a small multiple of n.
  std::vector<uint64_t> lengths;
  lengths.reserve(blocks.size());
  for (const Block& b : blocks) lengths.push_back(b.end - b.begin);
  std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
  const uint64_t median = lengths[lengths.size() / 2];
  while ((uint64_t{1} << width_shift_) < median && width_shift_ < 62) ++width_shift_;
  const uint64_t budget = 4 * static_cast<uint64_t>(blocks.size()) + 1024;
  while (width_shift_ < 62 && entries_for(blocks, origin_, width_shift_) > budget) ++width_shift_;
  // The bucket array spans the whole horizon: a few long-lived blocks far apart on a sparse clock
  // (timestamps in ns) would otherwise make it as long as the clock (found by fuzzing).
  while (width_shift_ < 62 && ((horizon - 1 - origin_) >> width_shift_) >= budget) ++width_shift_;
  // All lifetimes are known: size every bucket up front and lay them out in one array.
  const size_t buckets = bucket_of(horizon - 1) + 1;
  bucket_start_.assign(buckets + 1, 0);
  for (const Block& b : blocks) {
    if (span_of(b, origin_, width_shift_) > kLongSpan) continue;
    for (size_t bucket = bucket_of(b.begin), last = bucket_of(b.end - 1); bucket <= last;
         ++bucket) {
      ++bucket_start_[bucket + 1];
    }
  }
  for (size_t i = 0; i < buckets; ++i) bucket_start_[i + 1] += bucket_start_[i];
  bucket_fill_.assign(bucket_start_.begin(), bucket_start_.end() - 1);
  entries_.resize(bucket_start_.back());
}

size_t LiveIntervalIndex::bucket_of(uint64_t time) const {
  return static_cast<size_t>((time - origin_) >> width_shift_);
}

void LiveIntervalIndex::insert(size_t index, uint64_t lo, uint64_t hi) {
  const Block& b = blocks_[index];
  const Entry entry{b.begin, b.end, lo, hi, static_cast<uint32_t>(index)};
  if (span_of(b, origin_, width_shift_) > kLongSpan) {
    long_entries_.push_back(entry);
    return;
  }
  for (size_t bucket = bucket_of(b.begin), last = bucket_of(b.end - 1); bucket <= last; ++bucket) {
    entries_[bucket_fill_[bucket]++] = entry;
  }
}

template <typename Visit>
void LiveIntervalIndex::for_each_overlapping(uint64_t begin, uint64_t end, Visit&& visit) const {
  if (bucket_fill_.empty() || end <= origin_) return;
  begin = std::max(begin, origin_);
  const size_t first = bucket_of(begin);
  const size_t last = std::min(bucket_of(end - 1), bucket_fill_.size() - 1);
  for (size_t bucket = first; bucket <= last; ++bucket) {
    const Entry* e = entries_.data() + bucket_start_[bucket];
    const Entry* stop = entries_.data() + bucket_fill_[bucket];
    for (; e != stop; ++e) {
      if (e->begin >= end || e->end <= begin) continue;
      // Listed in every bucket it touches: report it only where its overlap with the query starts.
      if (bucket_of(std::max(e->begin, begin)) == bucket) visit(*e);
    }
  }
  for (const Entry& e : long_entries_) {
    if (e.begin < end && e.end > begin) visit(e);
  }
}

void LiveIntervalIndex::overlapping(uint64_t begin, uint64_t end, std::vector<size_t>& out) const {
  for_each_overlapping(begin, end, [&](const Entry& e) { out.push_back(e.index); });
}

void LiveIntervalIndex::overlapping_ranges(uint64_t begin, uint64_t end,
                                           std::vector<std::pair<uint64_t, uint64_t>>& out) const {
  for_each_overlapping(begin, end, [&](const Entry& e) { out.emplace_back(e.lo, e.hi); });
}

}  // namespace memoplan::planner

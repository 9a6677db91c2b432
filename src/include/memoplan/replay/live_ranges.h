// The address ranges of a slab in use right now, sorted by start: the replay guard. A planned slot
// is handed out only if it overlaps none of them, so a program that deviates from the plan (an
// extra allocation, a tensor kept longer, a reordering) gets fallback memory instead of memory
// that is still in use. Storage is the caller's (the shim cannot malloc here); single-owner (the
// count may be read from other threads: Arena's idle reaper).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::replay {

struct ByteRange {
  uint64_t lo;  // first byte offset
  uint64_t hi;  // one past the last
};

class LiveRanges {
 public:
  void init(ByteRange* storage, uint32_t capacity) {
    ranges_ = storage;
    capacity_ = capacity;
    count_.store(0, std::memory_order_relaxed);
  }

  // True when [lo, hi) intersects a live range.
  bool overlaps(uint64_t lo, uint64_t hi) const {
    const uint32_t i = lower_bound(lo);  // first range starting at or after lo
    if (i < count() && ranges_[i].lo < hi) return true;
    return i > 0 && ranges_[i - 1].hi > lo;
  }

  // Adds [lo, hi); false when full (the caller then falls back). Precondition: !overlaps(lo, hi).
  bool insert(uint64_t lo, uint64_t hi) {
    const uint32_t n = count();
    if (n == capacity_) return false;
    const uint32_t i = lower_bound(lo);
    for (uint32_t j = n; j > i; --j) ranges_[j] = ranges_[j - 1];
    ranges_[i] = {lo, hi};
    count_.store(n + 1, std::memory_order_relaxed);
    return true;
  }

  // Removes the range starting at lo and returns its length, or 0 when there is none.
  uint64_t erase(uint64_t lo) {
    const uint32_t n = count();
    const uint32_t i = lower_bound(lo);
    if (i == n || ranges_[i].lo != lo) return 0;
    const uint64_t length = ranges_[i].hi - ranges_[i].lo;
    for (uint32_t j = i; j + 1 < n; ++j) ranges_[j] = ranges_[j + 1];
    count_.store(n - 1, std::memory_order_relaxed);
    return length;
  }

  // Length of the live range starting at lo, 0 when none.
  uint64_t length_at(uint64_t lo) const {
    const uint32_t i = lower_bound(lo);
    return i < count() && ranges_[i].lo == lo ? ranges_[i].hi - ranges_[i].lo : 0;
  }

  uint32_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  uint32_t lower_bound(uint64_t lo) const {
    uint32_t first = 0, n = count();
    while (n > 0) {
      const uint32_t half = n / 2;
      if (ranges_[first + half].lo < lo) {
        first += half + 1;
        n -= half + 1;
      } else {
        n = half;
      }
    }
    return first;
  }

  ByteRange* ranges_ = nullptr;
  uint32_t capacity_ = 0;
  std::atomic<uint32_t> count_{0};
};

}  // namespace memoplan::replay

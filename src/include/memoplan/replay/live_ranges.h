// The address ranges of a slab in use right now, sorted by start: the replay guard. A planned slot
// is handed out only if it overlaps none of them, so a program that deviates from the plan (an
// extra allocation, a tensor kept longer, a reordering) gets fallback memory instead of memory
// that is still in use. Storage is the caller's (the shim cannot malloc here); single-owner (the
// count may be read from other threads: Arena's idle reaper).
//
// Shared ranges. A plan that lets blocks share bytes (the torch extension's --memory min: an op's
// output over its dying input, a concat's output over its inputs) places a block over live ranges
// with absorb(): they become one range whose `holders` counts the blocks in it, and a free of any
// of them (at the start of its own bytes, inside the range) counts one down; the range goes with
// the last. A range nobody shares has one holder, and only a free at its start releases it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::replay {

struct ByteRange {
  uint64_t lo;           // first byte offset
  uint64_t hi;           // one past the last
  uint32_t holders = 1;  // blocks in it (shared ranges: absorb())
  bool shared = false;   // made by absorb(): a free anywhere in it counts a holder down
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
    const uint32_t i = lower_bound(lo);
    if (i == count() || ranges_[i].lo != lo) return 0;
    return erase_at(i);
  }

  // The free of a block that starts at `at`: a range of one holder starting there goes (its
  // length returned); a shared range holding `at` loses a holder (kStillHeld, or its length when
  // that was the last; a double free there goes unnoticed). 0: no block starts there.
  static constexpr uint64_t kStillHeld = ~uint64_t{0};
  uint64_t release(uint64_t at) {
    const uint32_t n = count();
    uint32_t i = lower_bound(at);
    if (i < n && ranges_[i].lo == at && !ranges_[i].shared) return erase_at(i);
    if (i == n || ranges_[i].lo != at) {
      if (i == 0 || ranges_[i - 1].hi <= at) return 0;
      --i;  // inside the range before
    }
    ByteRange& r = ranges_[i];
    if (!r.shared) return 0;  // an interior pointer of a block nobody shares
    if (--r.holders > 0) return kStillHeld;
    return erase_at(i);
  }

  // Places [lo, hi) over the live ranges it overlaps, each of which must lie inside one of
  // `allowed` (disjoint): they and the new block become one shared range. kAbsorbed (with the
  // bytes the live ranges grew by in *grown), else nothing changed: kNotAllowed when an
  // overlapping range lies outside `allowed`, kFull when a new range finds no room.
  enum Absorb { kAbsorbed, kNotAllowed, kFull };
  Absorb absorb(uint64_t lo, uint64_t hi, const ByteRange* allowed, uint32_t allowed_count,
                uint64_t* grown) {
    const uint32_t n = count();
    uint32_t first = lower_bound(lo);
    if (first > 0 && ranges_[first - 1].hi > lo) --first;
    uint32_t last = first;  // one past the last overlapping range
    uint64_t new_lo = lo, new_hi = hi, had = 0;
    uint32_t holders = 1;
    for (; last < n && ranges_[last].lo < hi; ++last) {
      const ByteRange& r = ranges_[last];
      bool inside = false;
      for (uint32_t k = 0; k < allowed_count && !inside; ++k) {
        inside = allowed[k].lo <= r.lo && r.hi <= allowed[k].hi;
      }
      if (!inside) return kNotAllowed;
      new_lo = r.lo < new_lo ? r.lo : new_lo;
      new_hi = r.hi > new_hi ? r.hi : new_hi;
      holders += r.holders;
      had += r.hi - r.lo;
    }
    if (last == first) {
      if (!insert(lo, hi)) return kFull;
      *grown = hi - lo;
      return kAbsorbed;
    }
    ranges_[first] = {new_lo, new_hi, holders, true};
    const uint32_t gone = last - first - 1;
    for (uint32_t j = first + 1; j + gone < n; ++j) ranges_[j] = ranges_[j + gone];
    count_.store(n - gone, std::memory_order_relaxed);
    *grown = (new_hi - new_lo) - had;
    return kAbsorbed;
  }

  // Length of the live range starting at lo, 0 when none.
  uint64_t length_at(uint64_t lo) const {
    const uint32_t i = lower_bound(lo);
    return i < count() && ranges_[i].lo == lo ? ranges_[i].hi - ranges_[i].lo : 0;
  }

  uint32_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  // Removes range i; its length.
  uint64_t erase_at(uint32_t i) {
    const uint32_t n = count();
    const uint64_t length = ranges_[i].hi - ranges_[i].lo;
    for (uint32_t j = i; j + 1 < n; ++j) ranges_[j] = ranges_[j + 1];
    count_.store(n - 1, std::memory_order_relaxed);
    return length;
  }

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

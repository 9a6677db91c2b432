// The matcher: which planned slot serves the request in front of it. A plan is a table of slots
// in the profiled pass's allocation order, cut into visits (the LibTorch extension's visits are
// the stretches between two memoplan::AllocateTensor nodes; the shim's pass is one visit). A
// request's key is matched against the slots from a cursor: the shim's keys are call site and
// size, looked for a few slots ahead with the pass repeating (cyclic); the extension's are sizes,
// looked for through the rest of the current visit. Inline: it runs on every replayed request.
#pragma once

#include <cstdint>

namespace memoplan::replay {

struct Slot {
  static constexpr uint64_t kNoAlternate = ~uint64_t{0};
  uint64_t key;     // what a request must match
  uint64_t size;    // bytes planned
  uint64_t offset;  // in the arena
  bool planned;     // false: escaped the profiled pass; always served by the fallback
  // A second place, tried when the block at `offset` is still alive: an escaping block of a
  // cyclic plan alternates between two (escaping.h).
  uint64_t alternate = kNoAlternate;
  // The plan lays this block over live blocks it shares bytes with (an op's output over its
  // dying input, a concat's output over its inputs: Arena::place_shared); only the torch
  // extension's --memory min plans have such slots.
  bool shares = false;
};

struct Visit {
  int64_t node = -1;  // what starts it (the graph node; -1 the pass start)
  uint32_t first_slot = 0;
  uint32_t slot_count = 0;
};

class Matcher {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};

  // Matches over all of `slots` as one repeating pass, `lookahead` slots past the cursor at most.
  void start_cyclic(const Slot* slots, uint32_t count, uint32_t lookahead, uint32_t cursor) {
    slots_ = slots;
    begin_ = 0;
    end_ = count;
    lookahead_ = lookahead;
    cyclic_ = true;
    pos_ = count ? cursor % count : 0;
  }
  // Matches inside [first, first + count) only, through to its end (a visit).
  void start_window(const Slot* slots, uint32_t first, uint32_t count) {
    slots_ = slots;
    begin_ = pos_ = first;
    end_ = first + count;
    lookahead_ = count;
    cyclic_ = false;
  }
  // Nothing matches until the next start_*.
  void stop() {
    pos_ = end_;
    cyclic_ = false;
  }

  // The index of the slot serving `key`, the cursor moved past it; kNone when no slot near the
  // cursor matches (the cursor stays).
  uint32_t match(uint64_t key) {
    uint32_t i = pos_;
    for (uint32_t step = 0; step <= lookahead_; ++step) {
      if (i >= end_) {
        if (!cyclic_ || end_ == begin_) return kNone;
        i = begin_;
      }
      if (slots_[i].key == key) {
        pos_ = i + 1;
        if (pos_ == end_ && cyclic_) {
          pos_ = begin_;
          ++cycles_;
        }
        return i;
      }
      ++i;
    }
    return kNone;
  }

  // Cyclic: how many times the last slot was matched (completed passes).
  uint64_t cycles() const { return cycles_; }
  uint32_t cursor() const { return pos_; }
  void set_cursor(uint32_t cursor) { pos_ = cursor; }

 private:
  const Slot* slots_ = nullptr;
  uint32_t begin_ = 0, end_ = 0, pos_ = 0, lookahead_ = 0;
  bool cyclic_ = false;
  uint64_t cycles_ = 0;
};

// The visit after `current` that `node` starts, looked for `lookahead` visits on (a graph that
// took another branch finds its way back); Matcher::kNone when it is not there.
inline uint32_t next_visit(const Visit* visits, uint32_t count, uint32_t current, int64_t node,
                           uint32_t lookahead) {
  for (uint32_t v = current + 1; v < count && v <= current + lookahead; ++v) {
    if (visits[v].node == node) return v;
  }
  return Matcher::kNone;
}

}  // namespace memoplan::replay

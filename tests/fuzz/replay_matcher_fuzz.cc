// Fuzz target: the LD_PRELOAD shim's replay matcher (interpose/engine.h, called directly, no
// preloading). The input is a script: a profiled pass that the engine plans, then arbitrary
// allocations, frees, reallocs and frees from other threads in later passes. Whatever the script
// does, two live blocks must never share a byte and no block's contents may change under it:
// every block gets a pattern when allocated, checked at its free and at every pass boundary.
//
// Input: byte 0 = flags (bit 0: mark passes with pass_begin/pass_end, else automatic detection;
// bits 1-4: how often the first pass repeats before the rest, 1 to 16). Then ops, one byte each
// plus operands; op 6 ends a pass, the ops up to the first one are the profiled pass, and op 7 (bit
// 3 clear) runs the profiled pass again in the middle of a later one (in the profiled pass itself
// it frees elsewhere, as with bit 3 set: no recursion).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "engine.h"
#include "fuzz_check.h"
#include "stats.h"

namespace {

using namespace memoplan::shim;

struct Block {
  char* p;
  size_t size;
  uint64_t seed;
};

// The checks below run over every byte of every block: without coverage and ASan instrumentation
// (each compare would be a libFuzzer callback; these loops are the harness, not the code under
// test, and the slab is not ASan's memory anyway), and not inlined, which would instrument them.
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage", "address"), noinline))
#else
#define NO_COVERAGE __attribute__((noinline))
#endif

// One word of a block's pattern: a function of the block's seed and the word's index.
__attribute__((always_inline)) inline uint64_t pattern_word(uint64_t seed, size_t word) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + word * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}
__attribute__((always_inline)) inline uint8_t pattern_byte(uint64_t seed, size_t i) {
  return static_cast<uint8_t>(pattern_word(seed, i / 8) >> ((i % 8) * 8));
}

NO_COVERAGE void fill(char* p, size_t size, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t w = pattern_word(seed, i / 8);
    memcpy(p + i, &w, 8);
  }
  for (; i < size; ++i) p[i] = static_cast<char>(pattern_byte(seed, i));
}

// Index of the first wrong byte among the words checked (every `stride`-th one, and the last
// bytes), or `size`.
NO_COVERAGE size_t first_mismatch(const char* p, size_t size, uint64_t seed, size_t stride) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8 * stride) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    if (w != pattern_word(seed, i / 8)) return i;
  }
  for (i = size >= 8 ? size - 8 : 0; i < size; ++i) {
    if (static_cast<uint8_t>(p[i]) != pattern_byte(seed, i)) return i;
  }
  return size;
}

NO_COVERAGE bool all_zero(const char* p, size_t size) {
  uint64_t any = 0;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    any |= w;
  }
  for (; i < size; ++i) any |= static_cast<uint8_t>(p[i]);
  return any == 0;
}

// Sizes from a small set, so that later passes hit the profiled pass's keys (size-only keys:
// callsite_depth:0); some below min_size (4096: never planned), some large.
size_t size_of(uint8_t s) {
  if (s < 224) return (s % 32 + 1) * size_t{1024};
  return (s - 223) * size_t{64} * 1024;
}

class Heap {
 public:
  ~Heap() {
    while (!live_.empty()) free_at(0, false);
  }

  void alloc(size_t size, size_t alignment, bool zero) {
    char* p = static_cast<char*>(engine_alloc(size, alignment, zero));
    FUZZ_CHECK(p, "allocation of %zu bytes failed", size);
    FUZZ_CHECK(reinterpret_cast<uintptr_t>(p) % alignment == 0, "%p not aligned to %zu",
               static_cast<void*>(p), alignment);
    if (zero) FUZZ_CHECK(all_zero(p, size), "calloc'ed block of %zu bytes is not zeroed", size);
    FUZZ_CHECK(engine_usable_size(p) >= size, "usable size below %zu", size);
    add({p, size, ++seed_});
  }

  void free_at(size_t index, bool elsewhere) {
    const Block b = take(index);
    if (elsewhere) {
      std::thread([p = b.p] { engine_free(p); }).join();
    } else {
      engine_free(b.p);
    }
  }

  void realloc_at(size_t index, size_t size) {
    const Block old = take(index);
    char* q = static_cast<char*>(engine_realloc(old.p, size));
    FUZZ_CHECK(q, "realloc to %zu failed", size);
    const size_t kept = std::min(size, old.size);
    const size_t bad = first_mismatch(q, kept, old.seed, 1);
    FUZZ_CHECK(bad == kept, "realloc lost byte %zu of %zu", bad, kept);
    add({q, size, ++seed_});
  }

  // At pass boundaries: every 16th word of every live block (a block the engine handed out twice
  // is overwritten whole, so this sees it), in full at each free.
  void check_all() const {
    for (const Block& b : live_) check(b, 16);
  }
  size_t count() const { return live_.size(); }

 private:
  void add(const Block& b) {
    const auto address = reinterpret_cast<uintptr_t>(b.p);
    auto next = ranges_.lower_bound(address);
    FUZZ_CHECK(next == ranges_.end() || next->first >= address + b.size,
               "new block [%p +%zu) overlaps a live block", static_cast<void*>(b.p), b.size);
    FUZZ_CHECK(
        next == ranges_.begin() || std::prev(next)->first + std::prev(next)->second <= address,
        "new block [%p +%zu) overlaps a live block", static_cast<void*>(b.p), b.size);
    ranges_[address] = b.size;
    fill(b.p, b.size, b.seed);
    live_.push_back(b);
  }

  Block take(size_t index) {
    const Block b = live_[index];
    check(b, 1);
    live_.erase(live_.begin() + static_cast<ptrdiff_t>(index));
    ranges_.erase(reinterpret_cast<uintptr_t>(b.p));
    return b;
  }

  static void check(const Block& b, size_t stride) {
    const size_t bad = first_mismatch(b.p, b.size, b.seed, stride);
    FUZZ_CHECK(bad == b.size, "block [%p +%zu) overwritten at byte %zu", static_cast<void*>(b.p),
               b.size, bad);
  }

  std::vector<Block> live_;             // in allocation order
  std::map<uintptr_t, size_t> ranges_;  // address -> size, for the overlap check
  uint64_t seed_ = 0;
};

class Script {
 public:
  Script(const uint8_t* data, size_t size, bool marks) : data_(data), size_(size), marks_(marks) {
    first_end_ = 1;
    while (first_end_ < size_ && data_[first_end_] % 8 != 6) {
      first_end_ = skip_op(data_[first_end_], first_end_ + 1);
    }
  }

  // Runs ops from `at` to the next pass end (op 6) or the input's end; returns where it stopped.
  size_t run_pass(Heap& heap, size_t at) {
    if (marks_) engine_pass_begin();
    while (at < size_) {
      const uint8_t op = data_[at++];
      if (op % 8 == 6) break;
      if (op % 8 == 7 && !((op >> 3) & 1) && at > first_end_) {
        if (at < size_) ++at;           // its operand, unused
        if (marks_) engine_pass_end();  // the profiled pass again, as a pass of its own
        run_pass(heap, 1);
        if (marks_) engine_pass_begin();
        continue;
      }
      at = run_op(heap, op, at);
    }
    if (marks_) engine_pass_end();
    heap.check_all();
    return at;
  }

  // Where the ops after the profiled pass begin.
  size_t first_pass_end() const { return first_end_ < size_ ? first_end_ + 1 : first_end_; }

 private:
  uint8_t operand(size_t& at) const { return at < size_ ? data_[at++] : 0; }

  size_t skip_op(uint8_t op, size_t at) const {
    const int operands[8] = {1, 1, 1, 1, 0, 2, 0, 1};
    return at + static_cast<size_t>(operands[op % 8]);
  }

  size_t run_op(Heap& heap, uint8_t op, size_t at) {
    static const size_t kAlignments[4] = {16, 16, 64, 4096};
    switch (op % 8) {
      case 0:
      case 1:
      case 2:
        heap.alloc(size_of(operand(at)), kAlignments[(op >> 3) & 3], (op >> 5) & 1);
        break;
      case 3: {
        const uint8_t which = operand(at);
        if (heap.count()) heap.free_at(which % heap.count(), false);
        break;
      }
      case 4:  // the oldest block: lifetimes like a network's activations
        if (heap.count()) heap.free_at(0, false);
        break;
      case 5: {
        const uint8_t which = operand(at), size = operand(at);
        if (heap.count()) heap.realloc_at(which % heap.count(), size_of(size));
        break;
      }
      case 7: {  // another thread frees a block (the owner drains it at its next allocation)
        const uint8_t which = operand(at);
        if (heap.count()) heap.free_at(which % heap.count(), true);
        break;
      }
    }
    return at;
  }

  const uint8_t* data_;
  size_t size_;
  bool marks_;
  size_t first_end_;  // index of the op that ends the profiled pass (or size_)
};

// MEMOPLAN_FUZZ_STATS=1: the engine's counters after each input, to see that a seed reaches the
// slab at all (a script that never matches its plan tests only the fallback).
bool report_counters = false;

void print_counters() {
  const Stats& s = stats();
  uint64_t fallbacks = 0;
  for (const auto& f : s.fallbacks) fallbacks += f.load();
  std::fprintf(stderr,
               "plans %llu, planned hits %llu, steady hits %llu, fallbacks %llu, remote frees "
               "%llu\n",
               static_cast<unsigned long long>(s.plans.load()),
               static_cast<unsigned long long>(s.planned_hits.load()),
               static_cast<unsigned long long>(s.steady_hits.load()),
               static_cast<unsigned long long>(fallbacks),
               static_cast<unsigned long long>(s.remote_frees.load()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  report_counters = getenv("MEMOPLAN_FUZZ_STATS") != nullptr;
  // Read once, at the engine's first call: warm-up passes off (the first marked pass is profiled),
  // size-only keys (a script's sizes decide what matches the plan), the default min_size.
  setenv("MEMOPLAN_CONF", "passes:0,callsite_depth:0", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  const bool marks = data[0] & 1;
  const int repeats = 1 + ((data[0] >> 1) & 15);
  // A fresh thread: fresh per-thread engine state (profile, plan, slab), given back at its exit.
  std::thread([&] {
    Heap heap;
    Script script(data, size, marks);
    const size_t rest = script.first_pass_end();
    for (int i = 0; i < repeats; ++i) script.run_pass(heap, 1);
    for (size_t at = rest; at < size;) at = script.run_pass(heap, at);
    script.run_pass(heap, 1);
  }).join();
  if (report_counters) print_counters();
  return 0;
}

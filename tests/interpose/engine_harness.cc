#include "engine_harness.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>

#include "state.h"

namespace memoplan::shim::testing {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64: distinct seeds give unrelated patterns
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The pattern depends on the position, so a prefix of a block checks like the whole.
uint8_t pattern_byte(uint64_t mixed_seed, size_t i) {
  const uint64_t word = mixed_seed ^ ((i / 8) * 0x9e3779b97f4a7c15ull);
  return static_cast<uint8_t>(word >> ((i % 8) * 8));
}

void fill(char* p, size_t size, uint64_t seed) {
  const uint64_t m = mix(seed);
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<char>(pattern_byte(m, i));
}

// Index of the first byte that differs from the pattern, or `size` when none does.
size_t first_mismatch(const char* p, size_t size, uint64_t seed) {
  const uint64_t m = mix(seed);
  for (size_t i = 0; i < size; ++i) {
    if (static_cast<uint8_t>(p[i]) != pattern_byte(m, i)) return i;
  }
  return size;
}

// Every allocation of every script comes through the same call stack, so the engine's key of a
// request depends on its size alone (as for a program whose tensors all come from one allocator)
// and not on which test function runs the pass. The key hashes up to callsite_depth (at most 16)
// return addresses above the allocator; recursing 16 times makes them all the same one.
constexpr int kSameFrames = 16;

__attribute__((noinline)) void* allocate_here(int depth, size_t size, size_t alignment, bool zero) {
  void* p = depth == 0 ? engine_alloc(size, alignment, zero)
                       : allocate_here(depth - 1, size, alignment, zero);
  asm volatile("" ::: "memory");  // no tail call: every level keeps its frame
  return p;
}

}  // namespace

Origin origin_of(const void* p) {
  if (global().slabs.contains(p)) return Origin::kSlab;
  if (global().tags.contains(p)) return Origin::kTag;
  return Origin::kFallback;
}

const char* to_string(Origin origin) {
  switch (origin) {
    case Origin::kFallback:
      return "fallback";
    case Origin::kTag:
      return "tag";
    case Origin::kSlab:
      return "slab";
  }
  return "?";
}

const Options& engine_options() {
  engine_free(engine_alloc(1, 16, false));  // the first call reads MEMOPLAN_CONF
  return global().options;
}

uint64_t first_steady_pass() { return engine_options().passes + 2; }

bool engine_plans() {
  engine_options();
  return !global().mode_off;
}

bool engine_may_skip() {
  const bool required = getenv("CI") || getenv("MEMOPLAN_REQUIRE_PLANS");
  if (!required) {
    fprintf(stderr,
            "WARNING: memoplan's engine runs unplanned in this process: the engine "
            "tests skip (set MEMOPLAN_REQUIRE_PLANS=1 to make that a failure)\n");
  }
  return !required;
}

Counters counters() { return stats().load(); }

void on_fresh_thread(const std::function<void()>& fn) { std::thread(fn).join(); }

Op alloc(int id, size_t size, size_t alignment, bool zero) {
  return {Op::kAlloc, id, size, alignment, zero};
}
Op free_op(int id) { return {Op::kFree, id}; }
Op realloc_op(int id, size_t size) { return {Op::kRealloc, id, size}; }
Op free_elsewhere(int id) { return {Op::kFreeElsewhere, id}; }
Op realloc_elsewhere(int id, size_t size) { return {Op::kReallocElsewhere, id, size}; }

Script network_pass(int chain) {
  Script s = {alloc(0, 40000)};
  for (int i = 1; i <= chain; ++i) {
    s.push_back(alloc(i, 4096 * (1 + (i * 5) % 7) + 64 * i));
    if (i >= 3) s.push_back(free_op(i - 2));
  }
  s.push_back(free_op(chain - 1));
  s.push_back(free_op(chain));
  s.push_back(alloc(100, 9000, 16, /*zero=*/true));
  s.push_back(free_op(100));
  s.push_back(free_op(0));
  return s;
}

size_t allocations_in(const Script& script) {
  size_t n = 0;
  for (const Op& op : script) n += op.kind == Op::kAlloc;
  return n;
}

Heap::~Heap() {
  for (auto& [id, block] : by_id_) free_block(block, false);
  by_id_.clear();
  release_held();
}

void Heap::pass(const Script& script, bool marks) {
  begin_pass(marks);
  run(script);
  end_pass(marks);
}

void Heap::begin_pass(bool marks) {
  last_pass_.clear();
  if (marks) engine_pass_begin();
}

void Heap::end_pass(bool marks) {
  if (marks) engine_pass_end();
  check_all();
}

bool Heap::last_pass_all(Origin origin) const {
  for (const Allocated& a : last_pass_) {
    if (a.origin != origin) return false;
  }
  return !last_pass_.empty();
}

void Heap::run(const Script& script) {
  for (const Op& op : script) {
    const auto it = by_id_.find(op.id);
    if (tolerate_out_of_memory_ && op.kind != Op::kAlloc && it == by_id_.end()) continue;
    if ((op.kind == Op::kAlloc) == (it != by_id_.end())) {
      ADD_FAILURE() << "script error at block " << op.id;
      return;
    }
    switch (op.kind) {
      case Op::kAlloc: {
        const Block block = make(op.id, op.size, op.alignment, op.zero);
        if (!block.p && tolerate_out_of_memory_) break;
        if (!block.p) return;
        by_id_[op.id] = block;
        break;
      }
      case Op::kFree:
      case Op::kFreeElsewhere:
        free_block(it->second, op.kind == Op::kFreeElsewhere);
        by_id_.erase(it);
        break;
      case Op::kRealloc:
      case Op::kReallocElsewhere: {
        const Block old = it->second;
        char* q = nullptr;
        errno = 0;
        if (op.kind == Op::kRealloc) {
          q = static_cast<char*>(engine_realloc(old.p, op.size));
        } else {
          int error = 0;  // errno is the other thread's
          std::thread([&] {
            q = static_cast<char*>(engine_realloc(old.p, op.size));
            error = errno;
          }).join();
          errno = error;
        }
        if (!q) {
          if (!accept_null(op.size)) return;
          const size_t bad = first_mismatch(old.p, old.size, old.seed);
          if (bad != old.size) ADD_FAILURE() << "a failed realloc changed byte " << bad;
          break;
        }
        untrack(old);
        const size_t kept = old.size < op.size ? old.size : op.size;
        const size_t bad = first_mismatch(q, kept, old.seed);
        if (bad != kept) ADD_FAILURE() << "realloc lost byte " << bad << " of " << kept;
        Block moved{q, op.size, next_seed_++};
        track(moved);
        fill(moved.p, moved.size, moved.seed);
        it->second = moved;
        break;
      }
    }
  }
}

Heap::Block Heap::make(int id, size_t size, size_t alignment, bool zero) {
  errno = 0;
  char* p = static_cast<char*>(allocate_here(kSameFrames, size, alignment, zero));
  if (!p) {
    accept_null(size);
    return {nullptr, 0, 0};
  }
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    ADD_FAILURE() << "block " << id << " at " << static_cast<void*>(p) << " is not aligned to "
                  << alignment;
  }
  if (zero) {
    for (size_t i = 0; i < size; ++i) {
      if (p[i] != 0) {
        ADD_FAILURE() << "calloc'ed block " << id << " (" << to_string(origin_of(p))
                      << ") has a non-zero byte at " << i;
        break;
      }
    }
  }
  const size_t usable = engine_usable_size(p);
  if (usable < size) ADD_FAILURE() << "usable size " << usable << " < requested " << size;
  const Block block{p, size, next_seed_++};
  track(block);
  fill(p, size, block.seed);
  last_pass_.push_back({id, p, size, origin_of(p)});
  return block;
}

bool Heap::accept_null(size_t size) {
  if (!tolerate_out_of_memory_) {
    ADD_FAILURE() << "allocation of " << size << " bytes failed";
    return false;
  }
  if (errno != ENOMEM) ADD_FAILURE() << "NULL for " << size << " bytes with errno " << errno;
  ++out_of_memory_answers_;
  return true;
}

void Heap::track(const Block& block) {
  const auto address = reinterpret_cast<uintptr_t>(block.p);
  auto next = live_.lower_bound(address);
  if (next != live_.end() && next->first < address + block.size) {
    ADD_FAILURE() << "new block [" << static_cast<void*>(block.p) << " +" << block.size
                  << ") overlaps the live block at " << reinterpret_cast<void*>(next->first);
  }
  if (next != live_.begin()) {
    const auto previous = std::prev(next);
    if (previous->first + previous->second > address) {
      ADD_FAILURE() << "new block [" << static_cast<void*>(block.p) << " +" << block.size
                    << ") overlaps the live block at " << reinterpret_cast<void*>(previous->first)
                    << " +" << previous->second;
    }
  }
  live_[address] = block.size;
}

void Heap::untrack(const Block& block) { live_.erase(reinterpret_cast<uintptr_t>(block.p)); }

void Heap::free_block(const Block& block, bool elsewhere) {
  const size_t bad = first_mismatch(block.p, block.size, block.seed);
  if (bad != block.size) {
    ADD_FAILURE() << "block at " << static_cast<void*>(block.p) << " ("
                  << to_string(origin_of(block.p)) << ", " << block.size
                  << " bytes) was overwritten at byte " << bad;
  }
  untrack(block);
  if (elsewhere) {
    std::thread([p = block.p] { engine_free(p); }).join();
  } else {
    engine_free(block.p);
  }
}

void Heap::hold(int id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    ADD_FAILURE() << "hold: no block " << id;
    return;
  }
  held_.push_back(it->second);
  by_id_.erase(it);
}

bool intact(const GivenBlock& block) {
  return first_mismatch(block.p, block.size, block.seed) == block.size;
}

GivenBlock Heap::give_away(int id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    ADD_FAILURE() << "give_away: no block " << id;
    return {};
  }
  const Block block = it->second;
  untrack(block);
  by_id_.erase(it);
  return {block.p, block.size, block.seed};
}

void Heap::release_held(bool elsewhere) {
  for (const Block& block : held_) free_block(block, elsewhere);
  held_.clear();
}

std::string Heap::last_pass_origins() const {
  std::string text;
  for (const Allocated& a : last_pass_) {
    text += text.empty() ? "" : " ";
    text += to_string(a.origin);
  }
  return text;
}

size_t Heap::usable_size_elsewhere(int id) const {
  size_t usable = 0;
  std::thread([&] { usable = engine_usable_size(pointer(id)); }).join();
  return usable;
}

size_t Heap::size(int id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? 0 : it->second.size;
}

char* Heap::pointer(int id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.p;
}

void Heap::check_all() const {
  auto check = [](const Block& block) {
    const size_t bad = first_mismatch(block.p, block.size, block.seed);
    if (bad != block.size) {
      ADD_FAILURE() << "live block at " << static_cast<void*>(block.p) << " ("
                    << to_string(origin_of(block.p)) << ") was overwritten at byte " << bad;
    }
  };
  for (const auto& [id, block] : by_id_) check(block);
  for (const Block& block : held_) check(block);
}

int fork_quietly() {
  for (int waited_ms = 0; !reaper_settled() && waited_ms < 10000; ++waited_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return fork();
}

int child_status(int pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace memoplan::shim::testing

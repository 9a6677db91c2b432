#include "deviation_fuzz_support.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>

#include "engine.h"

namespace memoplan::shim::fuzz {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Word i of a block's pattern: distinct per block (seed) and per position. Byte i of a block is
// byte i % 8 of word i / 8 (little-endian), so a prefix of a block (after realloc) checks too.
inline uint64_t pattern_word(uint64_t mixed, size_t i) { return mixed + i * 0x9e3779b97f4a7c15ull; }
inline char tail_byte(uint64_t mixed, size_t i) {
  return static_cast<char>(pattern_word(mixed, i / 8) >> (8 * (i % 8)));
}

// One step of a pass. Ids below the plan's length are planned blocks, others extra ones.
struct Op {
  enum Kind { kAlloc, kFree, kRealloc, kFreeElsewhere } kind;
  int id;
  size_t size = 0;
  size_t alignment = 16;
  bool zero = false;
};
using Ops = std::vector<Op>;

// A random pass: allocations of random sizes, alignments and lifetimes; some escape the pass.
struct Pass {
  Ops ops;
  std::vector<bool> escapes;  // by id: freed only after the next pass
  int blocks = 0;
};

Pass random_pass(std::mt19937_64& random) {
  Pass pass;
  pass.blocks = 4 + static_cast<int>(random() % 37);
  std::vector<int> free_after(pass.blocks);
  pass.escapes.resize(pass.blocks);
  for (int i = 0; i < pass.blocks; ++i) {
    free_after[i] = std::min(pass.blocks - 1, i + static_cast<int>(random() % 6));
    pass.escapes[i] = random() % 12 == 0;
  }
  for (int i = 0; i < pass.blocks; ++i) {
    Op op{Op::kAlloc, i};
    const size_t base = size_t{64} << (random() % 10);  // 64 B .. 32 KiB
    op.size = base + random() % base;
    op.alignment = random() % 8 == 0 ? size_t{32} << (random() % 7) : 16;
    op.zero = random() % 8 == 0;
    pass.ops.push_back(op);
    for (int j = 0; j <= i; ++j) {
      if (free_after[j] == i && !pass.escapes[j]) pass.ops.push_back({Op::kFree, j});
    }
  }
  return pass;
}

size_t index_of(const Ops& ops, Op::Kind kind, int id) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == kind && ops[i].id == id) return i;
  }
  return ops.size();
}

// Applies one random deviation to `ops`; returns its kind, or -1 when it did not apply.
int deviate(Ops& ops, const Pass& pass, int& next_extra, std::mt19937_64& random) {
  const int kind = static_cast<int>(random() % kExitedWithBlocks);  // the per-pass kinds
  const int id = static_cast<int>(random() % pass.blocks);
  const size_t alloc_at = index_of(ops, Op::kAlloc, id);
  const size_t free_at = index_of(ops, Op::kFree, id);
  if (alloc_at == ops.size()) return -1;  // already skipped in this pass
  switch (kind) {
    case kSkipped:
      if (free_at != ops.size()) ops.erase(ops.begin() + static_cast<ptrdiff_t>(free_at));
      ops.erase(ops.begin() + static_cast<ptrdiff_t>(alloc_at));
      for (size_t i = ops.size(); i-- > 0;) {  // its realloc, if another deviation added one
        if (ops[i].id == id) ops.erase(ops.begin() + static_cast<ptrdiff_t>(i));
      }
      return kind;
    case kAdded: {
      Op extra = ops[alloc_at];
      extra.id = next_extra++;
      const size_t at = random() % (ops.size() + 1);
      ops.insert(ops.begin() + static_cast<ptrdiff_t>(at), extra);
      const size_t free_pos = at + 1 + random() % (ops.size() - at);
      ops.insert(ops.begin() + static_cast<ptrdiff_t>(free_pos), Op{Op::kFree, extra.id});
      return kind;
    }
    case kResized:
      ops[alloc_at].size = 64 + random() % 40000;
      return kind;
    case kReordered:
      for (size_t i = alloc_at; i + 1 < ops.size(); ++i) {
        if (ops[i].kind == Op::kAlloc && ops[i + 1].kind == Op::kAlloc) {
          std::swap(ops[i], ops[i + 1]);
          return kind;
        }
      }
      return -1;
    case kKeptAlive:
      if (free_at == ops.size()) return -1;
      ops.erase(ops.begin() + static_cast<ptrdiff_t>(free_at));
      return kind;
    case kFreedElsewhere:
      if (free_at == ops.size()) return -1;
      ops[free_at].kind = Op::kFreeElsewhere;
      return kind;
    case kRealloc: {
      Op resize{Op::kRealloc, id};
      resize.size = 64 + random() % 40000;
      ops.insert(ops.begin() + static_cast<ptrdiff_t>(alloc_at) + 1, resize);
      return kind;
    }
  }
  return -1;
}

// A block kept past its pass, and for how many more passes.
struct Held {
  Block block;
  int passes_left;
};

class Worker {
 public:
  Worker(Shared& shared, int lane, uint64_t seed) : shared_(shared), lane_(lane), random_(seed) {}

  void run(uint64_t passes) {
    const Pass pass = random_pass(random_);
    const bool marks = random_() % 4 != 0;  // else the engine must find the pass itself
    for (uint64_t n = 0; n < passes && !shared_.done(); ++n) {
      for (const Block& block : shared_.receive(lane_)) shared_.check_and_free(block);
      Ops ops = pass.ops;
      int next_extra = pass.blocks;
      if (n >= 3 && random_() % 2 == 0) {  // the first passes profile an undisturbed pass
        for (int k = 1 + static_cast<int>(random_() % 3); k > 0; --k) {
          const int kind = deviate(ops, pass, next_extra, random_);
          if (kind >= 0) shared_.deviations[kind].fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (marks) engine_pass_begin();
      execute(ops);
      // What is still alive: escaping blocks live one more pass, kept-alive ones 1-3.
      for (auto& [id, block] : alive_) {
        const bool escapes = id < pass.blocks && pass.escapes[id];
        held_.push_back({block, escapes ? 1 : 1 + static_cast<int>(random_() % 3)});
      }
      alive_.clear();
      if (marks) engine_pass_end();
      age_held();
      shared_.passes.fetch_add(1, std::memory_order_relaxed);
    }
    // The thread exits: what it still holds is freed here or, now and then, left to others.
    const bool hand_over = !held_.empty() && random_() % 2 == 0;
    if (hand_over) shared_.deviations[kExitedWithBlocks].fetch_add(1, std::memory_order_relaxed);
    for (const Held& h : held_) {
      if (hand_over) {
        shared_.send(other_lane(), h.block);
      } else {
        shared_.check_and_free(h.block);
      }
    }
  }

 private:
  int other_lane() {
    if (shared_.lanes() == 1) return lane_;
    return (lane_ + 1 + static_cast<int>(random_() % (shared_.lanes() - 1))) % shared_.lanes();
  }

  void age_held() {
    for (size_t i = held_.size(); i-- > 0;) {
      if (--held_[i].passes_left > 0) continue;
      if (random_() % 4 == 0) {
        shared_.send(other_lane(), held_[i].block);
      } else {
        shared_.check_and_free(held_[i].block);
      }
      held_[i] = held_.back();
      held_.pop_back();
    }
  }

  bool allocated(char* p, size_t size, size_t alignment, bool zero, Block& out) {
    if (!p) {
      if (!shared_.nulls_allowed() || errno != ENOMEM) {
        shared_.failure("unexpected NULL (or errno not ENOMEM)", nullptr, size);
      }
      shared_.null_answers.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (reinterpret_cast<uintptr_t>(p) % alignment) shared_.failure("misaligned block", p, size);
    if (zero) {
      for (size_t i = 0; i < size; ++i) {
        if (p[i]) {
          shared_.failure("calloc'ed block not zero", p, size);
          break;
        }
      }
    }
    out = {p, size, random_()};
    shared_.track(out);
    fill_pattern(out);
    shared_.blocks.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  void execute(const Ops& ops) {
    for (const Op& op : ops) {
      const auto it = alive_.find(op.id);
      if (op.kind == Op::kAlloc) {
        errno = 0;
        char* p = static_cast<char*>(engine_alloc(op.size, op.alignment, op.zero));
        Block block;
        if (allocated(p, op.size, op.alignment, op.zero, block)) alive_[op.id] = block;
        continue;
      }
      if (it == alive_.end()) continue;  // its allocation failed or was skipped
      const Block block = it->second;
      if (op.kind == Op::kFree) {
        shared_.check_and_free(block);
        alive_.erase(it);
      } else if (op.kind == Op::kFreeElsewhere) {
        shared_.send(other_lane(), block);
        alive_.erase(it);
      } else {  // realloc
        if (!pattern_intact(block)) shared_.failure("pattern broken before realloc", block.p, 0);
        // Forgotten before the call: once realloc has freed it (inside the call), another thread
        // may be given the same memory (a tag slot is anyone's once released).
        shared_.untrack(block);
        errno = 0;
        char* q = static_cast<char*>(engine_realloc(block.p, op.size));
        if (!q) {  // the block stays as it was
          Block unused;
          allocated(nullptr, op.size, 16, false, unused);
          if (!pattern_intact(block)) shared_.failure("failed realloc changed", block.p, 0);
          shared_.track(block);
          continue;
        }
        Block moved{q, op.size < block.size ? op.size : block.size, block.seed};
        if (!pattern_intact(moved)) shared_.failure("realloc lost bytes", q, moved.size);
        Block grown;
        allocated(q, op.size, 16, false, grown);
        it->second = grown;
      }
    }
  }

  Shared& shared_;
  const int lane_;
  std::mt19937_64 random_;
  std::map<int, Block> alive_;  // by op id, in the current pass
  std::vector<Held> held_;
};

}  // namespace

const char* deviation_name(int kind) {
  static const char* const names[kDeviationKinds] = {
      "skipped",    "added",           "resized", "reordered",
      "kept_alive", "freed_elsewhere", "realloc", "exited_with_blocks"};
  return kind >= 0 && kind < kDeviationKinds ? names[kind] : "?";
}

void fill_pattern(const Block& block) {
  const uint64_t mixed = mix(block.seed);
  const size_t words = block.size / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t w = pattern_word(mixed, i);
    memcpy(block.p + 8 * i, &w, 8);
  }
  for (size_t i = words * 8; i < block.size; ++i) block.p[i] = tail_byte(mixed, i);
}

bool pattern_intact(const Block& block) {
  const uint64_t mixed = mix(block.seed);
  const size_t words = block.size / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    memcpy(&w, block.p + 8 * i, 8);
    if (w != pattern_word(mixed, i)) return false;
  }
  for (size_t i = words * 8; i < block.size; ++i) {
    if (block.p[i] != tail_byte(mixed, i)) return false;
  }
  return true;
}

void Shared::failure(const char* what, const void* p, size_t size) {
  if (failures_printed_.fetch_add(1) < 10) {
    fprintf(stderr, "deviation_fuzz: %s: block %p, %zu bytes\n", what, p, size);
  }
  corruptions.fetch_add(1);
}

void Shared::track(const Block& block) {
  const auto address = reinterpret_cast<uintptr_t>(block.p);
  std::lock_guard<std::mutex> lock(live_mutex_);
  auto next = live_.lower_bound(address);
  auto other = live_.end();
  if (next != live_.end() && next->first < address + block.size) other = next;
  if (next != live_.begin() && std::prev(next)->first + std::prev(next)->second.size > address) {
    other = std::prev(next);
  }
  if (other != live_.end()) {
    overlaps.fetch_add(1);
    if (failures_printed_.fetch_add(1) < 10) {
      const Block old{reinterpret_cast<char*>(other->first), other->second.size,
                      other->second.seed};
      fprintf(stderr,
              "deviation_fuzz: block %p +%zu overlaps the live block %p +%zu (its pattern %s)\n",
              static_cast<void*>(block.p), block.size, static_cast<void*>(old.p), old.size,
              pattern_intact(old) ? "intact" : "broken");
    }
  }
  live_[address] = {block.size, block.seed};
}

void Shared::untrack(const Block& block) {
  std::lock_guard<std::mutex> lock(live_mutex_);
  live_.erase(reinterpret_cast<uintptr_t>(block.p));
}

void Shared::check_and_free(const Block& block) {
  if (!pattern_intact(block)) failure("pattern broken before free", block.p, block.size);
  untrack(block);
  engine_free(block.p);
}

void Shared::send(int lane, const Block& block) {
  std::lock_guard<std::mutex> lock(mail_mutex_);
  mailboxes_[lane].push_back(block);
}

std::vector<Block> Shared::receive(int lane) {
  std::lock_guard<std::mutex> lock(mail_mutex_);
  std::vector<Block> mail;
  mail.swap(mailboxes_[lane]);
  return mail;
}

void run_plan(Shared& shared, int lane, uint64_t seed, uint64_t passes) {
  Worker(shared, lane, seed).run(passes);
}

void drain_all(Shared& shared) {
  for (int lane = 0; lane < shared.lanes(); ++lane) {
    for (const Block& block : shared.receive(lane)) shared.check_and_free(block);
  }
}

}  // namespace memoplan::shim::fuzz

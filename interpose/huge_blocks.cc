#include "huge_blocks.h"

#include <atomic>

#include "engine.h"
#include "state.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// A huge block's owner word in the tag region (a profiled block's is its Profile's address, never
// 1: it is aligned).
constexpr uintptr_t kHugeOwner = 1;
size_t huge_from = 0;
uint64_t base_retain = 0;
std::atomic<uint64_t> live_bytes{0};  // of huge blocks, as requested

// The region may keep as many freed bytes as huge blocks are alive, at least its base allowance;
// what it kept past a lower allowance goes (the largest kept slots first).
void allow_retention(uint64_t live) {
  record::TagRegion& tags = global().tags;
  const uint64_t allowed = live > base_retain ? live : base_retain;
  tags.set_retain_bytes(allowed);
  if (tags.retained_bytes() > allowed) tags.trim_to(allowed);
}

}  // namespace

void set_huge_blocks(size_t from, uint64_t base) {
  huge_from = from;
  base_retain = base;
}

void* huge_alloc(size_t size, size_t alignment, bool zero) {
  Global& g = global();
  if (huge_from == 0 || size < huge_from || zero || g.mode_off || !g.tags.reserved() ||
      alignment > g.tags.slot_bytes()) {
    return nullptr;
  }
  record::TagRegion::Miss why;
  // A larger kept slot keeps its pages past the block: the next block may be larger, and
  // bench/large_blocks (random 5-25 MiB) took 0.30 s with them cut, 0.13 kept (glibc 0.13); the
  // kept bytes stay within the live huge blocks' (allow_retention). Only up to kReuseClasses
  // larger (tag_region.h): a slot refitted from one larger still is cut. Not cutting those either
  // took 0.09 s (811 mmap calls against 4,334) but peaked at 151 MiB against 15 (glibc 107): the
  // pages earlier blocks touched past each block stay resident.
  void* p = g.tags.take(size, false, kHugeOwner, 0, &why, 64, record::TagRegion::kKeepTail);
  if (!p) return nullptr;
  allow_retention(live_bytes.fetch_add(size, std::memory_order_relaxed) + size);
  stats().huge_blocks.fetch_add(1, std::memory_order_relaxed);
  return p;
}

bool huge_free(void* p) {
  Global& g = global();
  const record::TagRegion::Owner owner = g.tags.owner_of(p);
  if (owner.owner != kHugeOwner) return false;
  const uint64_t live = live_bytes.fetch_sub(owner.bytes, std::memory_order_relaxed) - owner.bytes;
  allow_retention(live);  // first: the free keeps its pages only within the new allowance
  g.tags.give_back(p);
  start_reaper();  // which expires the kept pages
  return true;
}

bool huge_resize(void* p, size_t size) {
  Global& g = global();
  const record::TagRegion::Owner owner = g.tags.owner_of(p);
  if (owner.owner != kHugeOwner || size < huge_from || size < owner.bytes / 2) return false;
  if (!g.tags.resize(p, size)) return false;
  const uint64_t change = size - owner.bytes;  // modulo 2^64: a shrink subtracts
  allow_retention(live_bytes.fetch_add(change, std::memory_order_relaxed) + change);
  return true;
}

}  // namespace memoplan::shim

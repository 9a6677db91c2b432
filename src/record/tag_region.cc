#include "memoplan/record/tag_region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace memoplan::record {
namespace {

constexpr uint64_t kPage = 4096;
uint64_t round_to_pages(uint64_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }
constexpr size_t kTableBytes = sizeof(uint64_t) * 4 * TagRegion::kSlots;

}  // namespace

bool TagRegion::reserve(unsigned largest_shift, unsigned smallest_shift, unsigned step) {
  if (reserved()) return true;
  void* table = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (table == MAP_FAILED) return false;
  for (unsigned shift = largest_shift; shift >= smallest_shift && shift >= step; shift -= step) {
    if (slots_.reserve(shift, kSlots)) break;
  }
  if (!slots_.reserved()) {
    const int saved = errno;
    munmap(table, kTableBytes);
    errno = saved;
    return false;
  }
  table_ = static_cast<Slot*>(table);
  return true;
}

void* TagRegion::take(uint64_t bytes, bool zero, uintptr_t owner, uint64_t record, Miss* why) {
  if (bytes > slots_.slot_bytes()) {
    *why = Miss::kTooLarge;
    return nullptr;
  }
  const uint32_t limit = live_limit_.load(std::memory_order_relaxed);
  if (limit && slots_.slots_in_use() >= limit) {  // approximate under races: a budget, not a wall
    *why = Miss::kOverLimit;
    return nullptr;
  }
  uint32_t index = 0;
  if (!slots_.acquire(index)) {
    *why = Miss::kNoSlot;
    return nullptr;
  }
  Slot& s = table_[index];
  char* at = slots_.slot_address(index);
  if (s.committed >= bytes && s.committed > 0) {  // kept pages: no system call, no page fault
    retained_.fetch_sub(s.committed, std::memory_order_relaxed);
    if (zero) memset(at, 0, bytes);
  } else {
    if (s.committed) {
      retained_.fetch_sub(s.committed, std::memory_order_relaxed);
      slots_.decommit(index, s.committed);
      s.committed = 0;
    }
    if ((commit_fault_ && commit_fault_()) ||
        !slots_.commit(index, bytes)) {  // e.g. vm.max_map_count reached
      slots_.release(index);
      *why = Miss::kCommitFailed;
      return nullptr;
    }
    s.committed = round_to_pages(bytes ? bytes : 1);
  }
  s.owner = owner;
  s.record = record;
  s.bytes = bytes;
  *why = Miss::kNone;
  return at;
}

void TagRegion::give_back(const void* p) {
  const uint32_t index = slots_.slot_of(p);
  Slot& s = table_[index];
  s.owner = 0;
  s.bytes = 0;
  const uint64_t limit = retain_limit_.load(std::memory_order_relaxed);
  if (limit && retained_.fetch_add(s.committed, std::memory_order_relaxed) + s.committed <= limit) {
    // kept for the next block
  } else {
    if (limit) retained_.fetch_sub(s.committed, std::memory_order_relaxed);
    slots_.decommit(index, s.committed);
    s.committed = 0;
  }
  slots_.release(index);
}

void TagRegion::trim() {
  if (!reserved()) return;
  for (uint32_t index = 0; index < kSlots; ++index) {
    if (!slots_.try_acquire(index)) continue;  // in use
    Slot& s = table_[index];                   // a free slot, ours until released
    if (s.committed) {
      retained_.fetch_sub(s.committed, std::memory_order_relaxed);
      slots_.decommit(index, s.committed);
      s.committed = 0;
    }
    slots_.release(index);
  }
}

void TagRegion::release_all() {
  slots_.release_all();
  if (table_) munmap(table_, kTableBytes);
  table_ = nullptr;
  retained_.store(0);
}

}  // namespace memoplan::record

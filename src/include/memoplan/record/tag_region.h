// Where profiled allocations live while they are recorded: a vm::SlotRegion of 2^16 slots, one
// block a slot, so the slot index of any pointer into a block (a view's, an interior one) is the
// block's 16-bit tag and leads to its record with a subtraction and a shift, from any thread.
// Pointers stay canonical (no tag bits in 48-63) and 64-byte aligned.
//
// Each slot remembers who recorded its block (an owner word and a record index) and how many
// bytes it has mapped. Freed slots may keep their pages for the next block of the same size class
// (`retain_bytes` in all), which saves two system calls, a TLB shootdown and the page faults of
// fresh pages per profiled allocation; trim() gives them back. Sizes are mapped rounded up to a
// class (exact up to 8 pages, then 4 classes per doubling: at most 25% over), and a kept slot is
// only reused for its own class, so a small block never pins a large block's pages. Kept slots sit
// on one lock-free stack per class (LIFO: the most recently used pages first). Lock-free; never
// calls malloc (the shim uses it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memoplan/vm/slot_region.h"

namespace memoplan::record {

class TagRegion {
 public:
  static constexpr uint32_t kSlots = 1u << 16;

  // Reserves the region with the largest slot size from 2^largest_shift down to 2^smallest_shift
  // (step 2^step) that the address space allows. False (errno set) when none.
  bool reserve(unsigned largest_shift, unsigned smallest_shift, unsigned step);
  bool reserved() const { return slots_.reserved(); }
  bool contains(const void* p) const { return slots_.contains(p); }
  const vm::SlotRegion& region() const { return slots_; }
  uint64_t slot_bytes() const { return slots_.slot_bytes(); }
  uint32_t slots_in_use() const { return slots_.slots_in_use(); }

  // At most this many blocks tagged at once (0: every slot). Each tagged block is a mapping of its
  // own (about two VMAs): a host near vm.max_map_count would see its own mmap calls fail.
  void set_live_limit(uint32_t blocks) { live_limit_.store(blocks, std::memory_order_relaxed); }
  uint32_t live_limit() const { return live_limit_.load(std::memory_order_relaxed); }

  // Freed slots keep up to this many bytes mapped in all (0: every free unmaps, the default).
  void set_retain_bytes(uint64_t bytes) { retain_limit_.store(bytes, std::memory_order_relaxed); }

  enum class Miss : uint8_t { kNone, kTooLarge, kNoSlot, kOverLimit, kCommitFailed };
  // A block of `bytes` recorded by (owner, record); nullptr and why when there is none. `zero`:
  // the block must read as zeros (fresh pages are; a slot that kept its pages is cleared).
  void* take(uint64_t bytes, bool zero, uintptr_t owner, uint64_t record, Miss* why);

  struct Owner {
    uintptr_t owner;
    uint64_t record;
    uint64_t bytes;
  };
  // Who recorded the live block holding p. Precondition: contains(p) and the block is alive.
  Owner owner_of(const void* p) const {
    const Slot& s = table_[slots_.slot_of(p)];
    return Owner{s.owner, s.record, s.bytes};
  }
  // The live block holding p (by its holder) grows or shrinks to `bytes` in place: its slot's
  // pages are mapped up to the size class of `bytes` (none are unmapped). False, the block
  // unchanged, past the slot's size or when the pages cannot be mapped.
  bool resize(const void* p, uint64_t bytes);
  // Frees the block holding p (from any thread): its pages are kept or unmapped.
  void give_back(const void* p);
  // Unmaps the pages every free slot kept; trim_to: of kept slots, the largest first, until at
  // most `bytes` stay kept.
  void trim();
  void trim_to(uint64_t bytes);
  uint64_t retained_bytes() const { return retained_.load(std::memory_order_relaxed); }

  // For the fault tests: called before each slot's pages are mapped; true makes it fail.
  void set_commit_fault(bool (*should_fail)()) { commit_fault_ = should_fail; }

  void release_all();  // for tests

 private:
  struct Slot {  // written by the slot's holder only (between acquire and release)
    uintptr_t owner;
    uint64_t record;
    uint64_t bytes;
    uint64_t committed;  // bytes mapped read-write, possibly kept while the slot is free
  };
  static constexpr int kClasses = 96;
  // Kept slots of one class: a Treiber stack of slot indices (next_ links them); the head packs
  // the top slot + 1 (0: empty) in the low 32 bits and a change count above it (no ABA).
  bool pop_kept(int size_class, uint32_t& slot);
  void push_kept(int size_class, uint32_t slot);

  vm::SlotRegion slots_;
  Slot* table_ = nullptr;                  // kSlots entries, mapped at reserve()
  std::atomic<uint32_t>* next_ = nullptr;  // kSlots entries, in the same mapping
  std::atomic<uint64_t> kept_[kClasses] = {};
  std::atomic<uint64_t> retain_limit_{0};
  std::atomic<uint64_t> retained_{0};
  std::atomic<uint32_t> live_limit_{0};
  bool (*commit_fault_)() = nullptr;
};

}  // namespace memoplan::record

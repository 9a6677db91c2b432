// A reserved, PROT_NONE range of virtual memory cut into equal power-of-two slots. Memory is
// committed per slot on demand and released on free.
//
// Two uses: the tag region (2^16 slots; the slot index of a pointer is its 16-bit allocation tag,
// found with a subtraction and a shift, so free(p), realloc(p) and any interior pointer map back
// to their allocation without a lookup; pointers stay canonical, unlike tags in bits 48-63), and
// the slab region (one slot per inference thread's slab, so "is this pointer a slab pointer, and
// whose" is one range check). Never allocates through malloc: the LD_PRELOAD shim uses it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::vm {

// Reserves `size` bytes (rounded up to pages) of PROT_NONE address space starting on a multiple of
// `alignment` (a power of two, a page or more). The start, or 0 (errno set) when it cannot be had.
uintptr_t reserve_range(size_t size, size_t alignment);

class SlotRegion {
 public:
  // Reserves slot_count slots of 2^slot_shift bytes, aligned to the whole region's size so that
  // bits [slot_shift, slot_shift + log2(slot_count)) of an inside pointer are its slot index.
  // Returns false (errno set) when the address space cannot be had.
  bool reserve(unsigned slot_shift, uint32_t slot_count);
  // The same over [base, base + (slot_count << slot_shift)), a range inside another region that
  // stays its owner's (reserved PROT_NONE, aligned to the slot size): release_all leaves it mapped.
  bool adopt(uintptr_t base, unsigned slot_shift, uint32_t slot_count);
  void release_all();  // unmaps everything; for tests
  bool reserved() const { return base_ != 0; }

  bool contains(const void* p) const { return reinterpret_cast<uintptr_t>(p) - base_ < size_; }
  // The reserved range [base(), base() + size()) (0, 0 before reserve): contains() without the
  // object, for a copy the shim's exported functions check (interpose/unplanned.h).
  uintptr_t base() const { return base_; }
  size_t size() const { return size_; }
  uint32_t slot_of(const void* p) const {
    return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(p) - base_) >> shift_);
  }
  char* slot_address(uint32_t slot) const {
    return reinterpret_cast<char*>(base_ + (static_cast<uintptr_t>(slot) << shift_));
  }
  size_t slot_bytes() const { return size_t{1} << shift_; }
  uint32_t slot_count() const { return count_; }

  // Maps [slot + offset, slot + offset + bytes) read-write (fresh zero pages). False on failure
  // or past the slot's end. `offset`: a multiple of the page size.
  bool commit(uint32_t slot, size_t bytes, size_t offset = 0);
  // Returns the pages of [slot + offset, slot + offset + bytes) to the kernel and makes them
  // inaccessible again. `offset`: a multiple of the page size.
  void decommit(uint32_t slot, size_t bytes, size_t offset = 0);

  // Hands out a free slot (false when all are taken) and takes one back. Lock-free.
  bool acquire(uint32_t& slot);
  // Takes that one slot if it is free (false when it is in use).
  bool try_acquire(uint32_t slot);
  void release(uint32_t slot);
  uint32_t slots_in_use() const { return in_use_.load(std::memory_order_relaxed); }

 private:
  bool make_used_bits(uint32_t slot_count);

  uintptr_t base_ = 0;
  size_t size_ = 0;
  bool adopted_ = false;
  unsigned shift_ = 0;
  uint32_t count_ = 0;
  // Slots in use: a bitmap scanned from a rotating hint; 1 bit per slot, allocated with mmap.
  std::atomic<uint64_t>* used_bits_ = nullptr;
  std::atomic<uint32_t> hint_{0};
  std::atomic<uint32_t> in_use_{0};
};

}  // namespace memoplan::vm

// One inference thread's slab for one plan: planned tensors live at their offsets, a live-range
// guard (runtime::LiveRanges, shared with the LD_PRELOAD shim) refuses any slot whose memory is
// still in use, and frees from other threads come back through a lock-free stack that the owner
// drains. Slabs live in one reserved region (runtime::SlotRegion, also shared with the shim) so
// "is this a slab block, and whose" is a range check and a shift. No torch headers.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "memoplan/runtime/live_ranges.h"

namespace memoplan::torch_ext {

class Slab {
 public:
  // A slab of `bytes` owned by the calling thread; nullptr when the region is full or the memory
  // cannot be had.
  static Slab* create(uint64_t bytes);
  // True for a pointer into any slab.
  static bool owns(const void* p);
  // Frees a slab block, from any thread.
  static void free_block(void* p);

  // Owner only: the block at `offset` of `size` bytes, or nullptr when it would overlap a live
  // block (the program deviated from the plan) or the guard is full.
  void* place(uint64_t offset, uint64_t size);
  // Owner only: applies frees other threads made.
  void drain_remote_frees();
  // Owner only, at thread exit: gives the slab back if no block is alive, else leaves that to the
  // free of its last block.
  void retire();

  uint64_t bytes() const { return bytes_; }

 private:
  Slab() = default;
  void release();
  void free_local(void* p);

  char* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint32_t slot_ = 0;
  const void* owner_ = nullptr;  // the owning thread's token
  runtime::LiveRanges live_;
  runtime::ByteRange* live_storage_ = nullptr;
  std::atomic<void*> remote_frees_{nullptr};
  std::mutex retire_mutex_;        // orders the owner's exit against late frees
  bool retired_ = false;           // under retire_mutex_
  Slab* next_released_ = nullptr;  // the list of released slabs (see release())
};

}  // namespace memoplan::torch_ext

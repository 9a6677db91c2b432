// Small tag slots shared by blocks of one stride (TagRegion's blocks of 32 KiB or less): a 64 KiB
// slot is mapped once and holds up to 16 blocks. Each class has one open slot, whose lowest free
// block is handed out next (a freed block's pages serve the next one, as kept slots' did); a
// full slot closes and is given back (unmapped) when its last block goes; until then the pages a
// free leaves wholly free go back at that free (MADV_DONTNEED): blocks that
// outlive one another (PyTorch 2.6 optimizing a frozen mobilenet_v2) held slots for their last
// block, peak 364 MiB, 359 now (glibc 341). One block a slot rounded
// each block up to whole pages and cost a mapping of its own: sqlite3's 4.3 KiB pages took 8 KiB
// each while profiled, and a database built while profiling kept them so.
//
// A block's slot is found by TagRegion's range check and shift; its place in the slot by a
// multiplication (stride's inverse), interior pointers included. Lock-free; never calls malloc.
#pragma once

#include <atomic>
#include <cstdint>

#include "memoplan/vm/slot_region.h"

namespace memoplan::record {

class SharedSlots {
 public:
  static constexpr uint64_t kLargestBlock = 32 << 10;  // two or more a slot
  static constexpr uint32_t kBlocksPerSlot = 16;       // strides of 4 KiB or more
  static constexpr int kClasses = 25;  // 4 KiB, then 8 a doubling up to 32 KiB (12.5% over at most)

  struct Entry {  // written by the block's taker, read by its holders
    uintptr_t owner;
    uint64_t record;
    uint64_t bytes;
  };

  // Maps its bookkeeping for the slots of `region` (TagRegion's small ones). False: no sharing.
  bool init(vm::SlotRegion* region);
  bool ready() const { return region_ != nullptr; }
  void release_all();

  // A block of `bytes` (at most kLargestBlock, aligned to 64) for (owner, record); nullptr when
  // a slot is needed and none can be had: none free, `slots_in_use` at `live_limit` (0: none), or
  // mapping it failed (`commit_failed` set; `should_fail`: the fault tests' hook, called first).
  // `zero`: the block must read as zeros (fresh pages do; a reused block is cleared).
  void* take(uint64_t bytes, bool zero, uintptr_t owner, uint64_t record, bool (*should_fail)(),
             uint32_t slots_in_use, uint32_t live_limit, bool* commit_failed);
  // Whether small slot `slot` is a shared one (its blocks are looked up here).
  bool shared(uint32_t slot) const { return state_[slot].stride != 0; }
  const Entry& entry(uint32_t slot, const void* p) const {
    return entries_[slot * kBlocksPerSlot + block_of(slot, p)];
  }
  // In place up to the block's stride.
  bool resize(uint32_t slot, const void* p, uint64_t bytes);
  void give_back(uint32_t slot, const void* p);
  // Each class's open slot stops taking blocks (unmapped now if none is alive, else at the free
  // of its last): a slot left open when its class's requests stop keeps its pages until then.
  void close_open();

 private:
  struct State {
    // Bits 0-15: live blocks; 16-20: blocks handed out; 21-25: class; 63: open (takes blocks).
    std::atomic<uint64_t> word;
    uint32_t stride;   // 0: not shared
    uint32_t inverse;  // ceil(2^32 / stride)
  };
  static constexpr uint64_t kOpen = uint64_t{1} << 63;
  uint32_t block_of(uint32_t slot, const void* p) const {
    const uint64_t offset =
        reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(region_->slot_address(slot));
    return static_cast<uint32_t>((offset * state_[slot].inverse) >> 32);
  }
  void close(uint32_t slot);
  void unmap(uint32_t slot);

  vm::SlotRegion* region_ = nullptr;
  State* state_ = nullptr;                     // one per slot of region_
  Entry* entries_ = nullptr;                   // kBlocksPerSlot per slot
  size_t mapped_bytes_ = 0;                    // of state_ and entries_ (one mapping)
  std::atomic<uint32_t> open_[kClasses] = {};  // each class's open slot + 1 (0: none)
};

}  // namespace memoplan::record

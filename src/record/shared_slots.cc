#include "memoplan/record/shared_slots.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace memoplan::record {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int kHandedShift = 16;
constexpr int kClassShift = 21;
constexpr uint64_t kLiveMask = 0xffff;

// The class of a block of `bytes` and its stride: 4 KiB, then 8 strides a doubling.
int stride_class(uint64_t bytes, uint32_t& stride) {
  if (bytes <= kPage) {
    stride = kPage;
    return 0;
  }
  const int k = 63 - __builtin_clzll(bytes - 1);  // 2^k < bytes <= 2^(k+1), k in 12..14
  const uint64_t step = uint64_t{1} << (k - 3);
  const uint64_t rounded = (bytes + step - 1) & ~(step - 1);
  stride = static_cast<uint32_t>(rounded);
  return 1 + (k - 12) * 8 + static_cast<int>(rounded / step - 9);
}

uint32_t blocks_per_slot(uint32_t stride, uint64_t slot_bytes) {
  const uint64_t fit = slot_bytes / stride;
  return static_cast<uint32_t>(fit < SharedSlots::kBlocksPerSlot ? fit
                                                                 : SharedSlots::kBlocksPerSlot);
}

}  // namespace

bool SharedSlots::init(vm::SlotRegion* region) {
  if (ready() || !region->reserved() || region->slot_bytes() < 2 * kLargestBlock) return false;
  const size_t slots = region->slot_count();
  const size_t bytes = slots * (sizeof(State) + kBlocksPerSlot * sizeof(Entry));
  void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (at == MAP_FAILED) return false;
  state_ = static_cast<State*>(at);
  entries_ = reinterpret_cast<Entry*>(state_ + slots);
  mapped_bytes_ = bytes;
  region_ = region;
  return true;
}

void SharedSlots::release_all() {
  if (state_) munmap(state_, mapped_bytes_);
  state_ = nullptr;
  entries_ = nullptr;
  region_ = nullptr;
  for (auto& open : open_) open.store(0);
}

void* SharedSlots::take(uint64_t bytes, bool zero, uintptr_t owner, uint64_t record,
                        bool (*should_fail)(), uint32_t slots_in_use, uint32_t live_limit,
                        bool* commit_failed) {
  uint32_t stride = 0;
  const int size_class = stride_class(bytes, stride);
  const uint32_t per_slot = blocks_per_slot(stride, region_->slot_bytes());
  for (;;) {
    uint32_t open = open_[size_class].load(std::memory_order_acquire);
    if (open) {
      const uint32_t slot = open - 1;
      State& s = state_[slot];
      uint64_t word = s.word.load(std::memory_order_acquire);
      // The class is checked in the word claimed: the slot may have been closed, unmapped and
      // opened again for another class since `open` was read.
      while ((word & kOpen) && static_cast<int>((word >> kClassShift) & 31) == size_class) {
        // The lowest free block: one freed before (its pages reused, as a kept slot's were) or
        // the next never handed out.
        const uint64_t free_blocks = ~word & ((uint64_t{1} << per_slot) - 1);
        if (!free_blocks) break;
        const uint32_t block = static_cast<uint32_t>(__builtin_ctzll(free_blocks));
        const uint32_t handed = static_cast<uint32_t>((word >> kHandedShift) & 31);
        const uint64_t claimed =
            (word | (uint64_t{1} << block)) + (block == handed ? uint64_t{1} << kHandedShift : 0);
        if (s.word.compare_exchange_weak(word, claimed, std::memory_order_acq_rel)) {
          Entry& e = entries_[slot * kBlocksPerSlot + block];
          e.owner = owner;
          e.record = record;
          e.bytes = bytes;
          char* at = region_->slot_address(slot) + uint64_t{block} * stride;
          if (zero && block < handed) memset(at, 0, bytes);
          return at;
        }
      }
      // Full (or no longer this class's): whoever replaces it in open_ closes it.
      if (open_[size_class].compare_exchange_strong(open, 0, std::memory_order_acq_rel)) {
        close(slot);
      }
      continue;
    }
    uint32_t slot = 0;
    if ((live_limit && slots_in_use >= live_limit) || !region_->acquire(slot)) return nullptr;
    if ((should_fail && should_fail()) || !region_->commit(slot, region_->slot_bytes())) {
      region_->release(slot);
      *commit_failed = true;
      return nullptr;
    }
    State& s = state_[slot];
    s.stride = stride;
    s.inverse = static_cast<uint32_t>(((uint64_t{1} << 32) + stride - 1) / stride);
    s.word.store(kOpen | uint64_t(size_class) << kClassShift, std::memory_order_release);
    uint32_t none = 0;
    if (!open_[size_class].compare_exchange_strong(none, slot + 1, std::memory_order_acq_rel)) {
      unmap(slot);  // another thread opened one meanwhile: take from it
    }
  }
}

void SharedSlots::close_open() {
  if (!ready()) return;
  for (auto& open : open_) {
    const uint32_t slot = open.exchange(0, std::memory_order_acq_rel);
    if (slot) close(slot - 1);
  }
}

void SharedSlots::close(uint32_t slot) {
  const uint64_t word = state_[slot].word.fetch_and(~kOpen, std::memory_order_acq_rel);
  if ((word & kOpen) && (word & kLiveMask) == 0) unmap(slot);  // its blocks were all freed
}

bool SharedSlots::resize(uint32_t slot, const void* p, uint64_t bytes) {
  const uint32_t block = block_of(slot, p);
  Entry& e = entries_[slot * kBlocksPerSlot + block];
  const uint64_t start = uint64_t{block} * state_[slot].stride;
  if (reinterpret_cast<uintptr_t>(p) !=
          reinterpret_cast<uintptr_t>(region_->slot_address(slot)) + start ||
      bytes > state_[slot].stride) {
    return false;
  }
  e.bytes = bytes;
  return true;
}

void SharedSlots::give_back(uint32_t slot, const void* p) {
  const uint32_t block = block_of(slot, p);
  Entry& e = entries_[slot * kBlocksPerSlot + block];
  e.owner = 0;
  e.bytes = 0;
  const uint64_t bit = uint64_t{1} << block;
  // A closed slot hands out no block again: while others stay alive (the last one's free unmaps
  // the slot), the pages this free leaves wholly free go back now: those this block touches that
  // lie within the run of free blocks around it (the run's other pages went back at their own
  // blocks' frees). Before its bit clears: until then the slot cannot be unmapped and taken by
  // another.
  const uint64_t before = state_[slot].word.load(std::memory_order_acquire);
  if (!(before & kOpen) && (before & kLiveMask & ~bit) != 0) {
    const uint64_t live = (before & kLiveMask) & ~bit;
    uint32_t first = block, last = block + 1;  // the free blocks around it: [first, last)
    while (first > 0 && !(live >> (first - 1) & 1)) --first;
    while (last < kBlocksPerSlot && !(live >> last & 1)) ++last;
    const uint64_t stride = state_[slot].stride;
    const uint64_t slot_bytes = region_->slot_bytes();
    const uint64_t run_end = last * stride < slot_bytes ? last * stride : slot_bytes;
    const uint64_t block_end = (block + 1) * stride;  // blocks lie within the slot
    const uint64_t from =
        std::max((first * stride + kPage - 1) & ~(kPage - 1), block * stride & ~(kPage - 1));
    const uint64_t to = std::min(run_end & ~(kPage - 1), (block_end + kPage - 1) & ~(kPage - 1));
    if (to > from) madvise(region_->slot_address(slot) + from, to - from, MADV_DONTNEED);
  }
  const uint64_t word = state_[slot].word.fetch_and(~bit, std::memory_order_acq_rel) & ~bit;
  // The last block of a closed slot: nobody takes from it any more.
  if (!(word & kOpen) && (word & kLiveMask) == 0) unmap(slot);
}

void SharedSlots::unmap(uint32_t slot) {
  State& s = state_[slot];
  s.word.store(0, std::memory_order_relaxed);
  s.stride = 0;
  region_->decommit(slot, region_->slot_bytes());
  region_->release(slot);
}

}  // namespace memoplan::record

#include "memoplan/vm/slot_region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>

namespace memoplan::vm {
namespace {

constexpr size_t kPage = 4096;
size_t round_to_pages(size_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }

}  // namespace

uintptr_t reserve_range(size_t size, size_t alignment) {
  if (size == 0 || alignment < kPage || (alignment & (alignment - 1)) ||
      size > SIZE_MAX - alignment) {
    errno = EINVAL;
    return 0;
  }
  size = round_to_pages(size);
  // Reserve the size and one alignment more, then trim both ends.
  const size_t over = size + alignment;
  void* raw = mmap(nullptr, over, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return 0;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + size;
  if (start + over > tail) munmap(reinterpret_cast<void*>(tail), start + over - tail);
  return aligned;
}

bool SlotRegion::reserve(unsigned slot_shift, uint32_t slot_count) {
  if (base_ || slot_count == 0 || (slot_count & (slot_count - 1)) || slot_shift < 12 ||
      slot_shift > 40) {
    errno = EINVAL;
    return false;
  }
  const size_t size = size_t{slot_count} << slot_shift;
  // Starts on a multiple of its own size.
  const uintptr_t aligned = reserve_range(size, size);
  if (!aligned) return false;

  if (!make_used_bits(slot_count)) {
    munmap(reinterpret_cast<void*>(aligned), size);
    return false;
  }
  base_ = aligned;
  size_ = size;
  shift_ = slot_shift;
  return true;
}

bool SlotRegion::adopt(uintptr_t base, unsigned slot_shift, uint32_t slot_count) {
  if (base_ || slot_count == 0 || slot_shift < 12 || slot_shift > 40 ||
      (base & ((uintptr_t{1} << slot_shift) - 1))) {
    errno = EINVAL;
    return false;
  }
  if (!make_used_bits(slot_count)) return false;
  base_ = base;
  size_ = size_t{slot_count} << slot_shift;
  shift_ = slot_shift;
  adopted_ = true;
  return true;
}

bool SlotRegion::make_used_bits(uint32_t slot_count) {
  const size_t words = (slot_count + 63) / 64;
  void* bits = mmap(nullptr, round_to_pages(words * sizeof(uint64_t)), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (bits == MAP_FAILED) return false;
  used_bits_ = static_cast<std::atomic<uint64_t>*>(bits);
  // Zero pages: every slot free, and no page of the map touched until a slot in it is taken;
  // only the bits past the last slot are set.
  if (slot_count % 64) {
    used_bits_[words - 1].store(~uint64_t{0} << (slot_count % 64), std::memory_order_relaxed);
  }
  count_ = slot_count;
  return true;
}

void SlotRegion::release_all() {
  if (!base_) return;
  if (!adopted_) munmap(reinterpret_cast<void*>(base_), size_);
  munmap(used_bits_, round_to_pages((count_ + 63) / 64 * sizeof(uint64_t)));
  base_ = 0;
  size_ = 0;
  count_ = 0;
  used_bits_ = nullptr;
  adopted_ = false;
  in_use_.store(0);
}

bool SlotRegion::commit(uint32_t slot, size_t bytes, size_t offset) {
  if (slot >= count_ || offset > slot_bytes() || bytes > slot_bytes() - offset) return false;
  void* at = slot_address(slot) + offset;
  return mmap(at, round_to_pages(bytes ? bytes : 1), PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
}

void SlotRegion::decommit(uint32_t slot, size_t bytes, size_t offset) {
  if (slot >= count_ || offset >= slot_bytes()) return;
  if (bytes > slot_bytes() - offset) bytes = slot_bytes() - offset;
  // Mapping fresh PROT_NONE pages over the range frees the old ones in one call.
  mmap(slot_address(slot) + offset, round_to_pages(bytes ? bytes : 1), PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

bool SlotRegion::acquire(uint32_t& slot) {
  const uint32_t words = (count_ + 63) / 64;
  const uint32_t start = hint_.load(std::memory_order_relaxed) % (words ? words : 1);
  for (uint32_t i = 0; i < words; ++i) {
    const uint32_t w = (start + i) % words;
    uint64_t bits = used_bits_[w].load(std::memory_order_relaxed);
    while (~bits) {
      const uint64_t lowest = ~bits & (bits + 1);  // the lowest free slot's bit
      if (used_bits_[w].compare_exchange_weak(bits, bits | lowest, std::memory_order_acquire)) {
        slot = w * 64 + static_cast<uint32_t>(__builtin_ctzll(lowest));
        hint_.store(w, std::memory_order_relaxed);
        in_use_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    }
  }
  return false;
}

bool SlotRegion::try_acquire(uint32_t slot) {
  if (slot >= count_) return false;
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if (used_bits_[slot / 64].fetch_or(bit, std::memory_order_acquire) & bit) return false;
  in_use_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SlotRegion::release(uint32_t slot) {
  used_bits_[slot / 64].fetch_and(~(uint64_t{1} << (slot % 64)), std::memory_order_release);
  in_use_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace memoplan::vm

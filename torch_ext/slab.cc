#include "slab.h"

#include <mutex>

#include "memoplan/runtime/slot_region.h"

namespace memoplan::torch_ext {
namespace {

// 4 GiB per slab, less where the address space is short (ThreadSanitizer, ulimit -v); a plan
// larger than a slab runs unplanned.
constexpr unsigned kLargestSlabShift = 32;
constexpr unsigned kSmallestSlabShift = 24;
constexpr uint32_t kSlabCount = 1024;  // slabs alive at once (threads x plans)
constexpr uint32_t kGuardCapacity = 1 << 14;

runtime::SlotRegion& region() {
  static runtime::SlotRegion* r = [] {
    auto* reserved = new runtime::SlotRegion();  // never destroyed: deleters run at exit too
    for (unsigned shift = kLargestSlabShift; shift >= kSmallestSlabShift; shift -= 2) {
      if (reserved->reserve(shift, kSlabCount)) break;
    }
    return reserved;
  }();
  return *r;
}

Slab* owners[kSlabCount];  // slab slot -> slab
// Released slabs' objects, kept (a concurrent free_block may still hold one's mutex) and
// reachable, so they are retained on purpose rather than leaked.
std::atomic<Slab*> released_slabs{nullptr};

// Identifies the calling thread: the address of a thread-local.
const void* thread_token() {
  static thread_local char token;
  return &token;
}

}  // namespace

Slab* Slab::create(uint64_t bytes) {
  runtime::SlotRegion& r = region();
  uint32_t slot = 0;
  if (!r.reserved() || bytes > r.slot_bytes() || !r.acquire(slot)) return nullptr;
  if (!r.commit(slot, bytes ? bytes : 1)) {
    r.release(slot);
    return nullptr;
  }
  auto* slab = new Slab();
  slab->base_ = r.slot_address(slot);
  slab->bytes_ = bytes;
  slab->slot_ = slot;
  slab->owner_ = thread_token();
  slab->live_storage_ = new runtime::ByteRange[kGuardCapacity];
  slab->live_.init(slab->live_storage_, kGuardCapacity);
  __atomic_store_n(&owners[slot], slab, __ATOMIC_RELEASE);
  return slab;
}

bool Slab::owns(const void* p) { return region().contains(p); }

void* Slab::place(uint64_t offset, uint64_t size) {
  if (remote_frees_.load(std::memory_order_relaxed)) drain_remote_frees();
  const uint64_t hi = offset + (size ? size : 1);
  if (live_.overlaps(offset, hi) || !live_.insert(offset, hi)) return nullptr;
  return base_ + offset;
}

void Slab::free_local(void* p) {
  live_.erase(static_cast<uint64_t>(static_cast<char*>(p) - base_));
}

void Slab::drain_remote_frees() {
  void* head = remote_frees_.exchange(nullptr, std::memory_order_acquire);
  while (head) {
    void* next = *static_cast<void**>(head);
    free_local(head);
    head = next;
  }
}

void Slab::free_block(void* p) {
  Slab* slab = __atomic_load_n(&owners[region().slot_of(p)], __ATOMIC_ACQUIRE);
  if (slab->owner_ == thread_token()) return slab->free_local(p);
  // Another thread's block: planned sizes are rounded to 64 bytes, so the link fits.
  void* head = slab->remote_frees_.load(std::memory_order_relaxed);
  do {
    *static_cast<void**>(p) = head;
  } while (!slab->remote_frees_.compare_exchange_weak(head, p, std::memory_order_release,
                                                      std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(slab->retire_mutex_);
  if (slab->retired_) {  // the owner is gone: whoever frees the last block gives the slab back
    slab->drain_remote_frees();
    if (slab->live_.count() == 0) {
      slab->release();
      return;  // the mutex is part of the slab, which release() keeps (see there)
    }
  }
}

void Slab::retire() {
  std::lock_guard<std::mutex> lock(retire_mutex_);
  drain_remote_frees();
  retired_ = true;
  if (live_.count() == 0) release();
}

void Slab::release() {
  runtime::SlotRegion& r = region();
  __atomic_store_n(&owners[slot_], nullptr, __ATOMIC_RELEASE);
  r.decommit(slot_, bytes_ ? bytes_ : 1);
  r.release(slot_);
  delete[] live_storage_;
  live_storage_ = nullptr;
  // The Slab object itself stays (a few hundred bytes per retired slab): a concurrent free_block
  // may still hold its mutex.
  next_released_ = released_slabs.load(std::memory_order_relaxed);
  while (!released_slabs.compare_exchange_weak(next_released_, this, std::memory_order_release,
                                               std::memory_order_relaxed)) {
  }
}

}  // namespace memoplan::torch_ext

// Puts an allocator in c10's CPU slot for a scope and the previous one back afterwards.
//
// c10::SetAllocator(type, allocator, priority) only takes effect when `priority` is at least the
// slot's stored priority, and then stores `priority`. Installing at a fixed high priority would
// ratchet the slot up for good (later, legitimate SetAllocator calls would silently fail), and a
// fixed low one silently fails when someone registered higher. So the swap finds the stored
// priority (the lowest priority whose SetAllocator takes effect) and installs and restores at
// exactly that priority: the slot's priority is unchanged afterwards, and an allocator someone else
// installed in between is left in place. Not thread-safe, like SetAllocator itself.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>

namespace memoplan::torch_ext {

class CpuAllocatorSwap {
 public:
  explicit CpuAllocatorSwap(c10::Allocator* replacement);
  ~CpuAllocatorSwap();
  CpuAllocatorSwap(const CpuAllocatorSwap&) = delete;
  CpuAllocatorSwap& operator=(const CpuAllocatorSwap&) = delete;

  c10::Allocator* previous() const { return previous_; }
  uint8_t priority() const { return priority_; }  // the slot's priority, kept as it was

 private:
  c10::Allocator* replacement_;
  c10::Allocator* previous_;
  uint8_t priority_ = 0;
};

}  // namespace memoplan::torch_ext

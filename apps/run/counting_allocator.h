// Counts the tensor requests of the unplanned passes: a c10::Allocator that sits on top of c10's
// CPU slot (above memoplan's replay allocator) while `memoplan run` measures and passes every
// request on. It counts the non-empty requests a thread makes while its counting flag is on (set
// around each timed unplanned pass): those are the tensor allocations that reach the system
// allocator when nothing is planned. Installed once for the whole measurement rather than around
// each unplanned pass, because swapping c10's allocator while other threads run is not safe; the
// planned passes go through it too (one virtual call and a thread-local test per request), so
// both sides pay the same.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "memoplan/torch/allocator_base.h"

namespace memoplan::torch_ext {
class CpuAllocatorSwap;
}

namespace memoplan::run {

class CountingAllocator final : public torch_ext::AllocatorBase<CountingAllocator> {
 public:
  c10::DataPtr allocate_block(size_t bytes) const;
  c10::DeleterFnPtr raw_deleter() const override;

  // Puts this allocator in c10's CPU slot (on top of what is there) / the previous one back.
  void install();
  void uninstall();

  // Counting for the calling thread, on or off.
  static void count_this_thread(bool on);
  uint64_t counted() const { return counted_.load(std::memory_order_relaxed); }

 private:
  c10::Allocator* next_ = nullptr;
  std::unique_ptr<torch_ext::CpuAllocatorSwap> swap_;
  mutable std::atomic<uint64_t> counted_{0};
};

// The process's one instance: never destroyed, since storages made through it keep a pointer to
// it (resizing one calls it again).
CountingAllocator& counting_allocator();

}  // namespace memoplan::run

#include "counting_allocator.h"

#include "memoplan/torch/cpu_allocator_swap.h"

namespace memoplan::run {
namespace {

thread_local bool counting = false;

}  // namespace

c10::DataPtr CountingAllocator::allocate_block(size_t bytes) const {
  if (counting && bytes != 0) counted_.fetch_add(1, std::memory_order_relaxed);
  return next_->allocate(bytes);  // its DataPtr, with its deleter: frees never come here
}

c10::DeleterFnPtr CountingAllocator::raw_deleter() const { return next_->raw_deleter(); }

void CountingAllocator::install() {
  if (swap_) return;
  next_ = c10::GetAllocator(c10::DeviceType::CPU);
  swap_ = std::make_unique<torch_ext::CpuAllocatorSwap>(this);
}

void CountingAllocator::uninstall() { swap_.reset(); }

void CountingAllocator::count_this_thread(bool on) { counting = on; }

CountingAllocator& counting_allocator() {
  static CountingAllocator* instance = new CountingAllocator();
  return *instance;
}

}  // namespace memoplan::run

#include "memoplan/torch/cpu_allocator_swap.h"

namespace memoplan::torch_ext {

CpuAllocatorSwap::CpuAllocatorSwap(c10::Allocator* replacement)
    : replacement_(replacement), previous_(c10::GetAllocator(c10::DeviceType::CPU)) {
  if (previous_ == replacement_) return;  // already in place: nothing to undo either
  // The first priority that takes effect is the stored one (SetAllocator needs >=), so the slot
  // keeps its priority. 255 always takes effect.
  for (unsigned p = 0; p <= 255; ++p) {
    c10::SetAllocator(c10::DeviceType::CPU, replacement_, static_cast<uint8_t>(p));
    if (c10::GetAllocator(c10::DeviceType::CPU) == replacement_) {
      priority_ = static_cast<uint8_t>(p);
      break;
    }
  }
}

CpuAllocatorSwap::~CpuAllocatorSwap() {
  if (previous_ == replacement_) return;
  // Someone who replaced ours meanwhile keeps the slot.
  if (c10::GetAllocator(c10::DeviceType::CPU) != replacement_) return;
  c10::SetAllocator(c10::DeviceType::CPU, previous_, priority_);
}

}  // namespace memoplan::torch_ext

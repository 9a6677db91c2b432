// The c10::Allocator interface as memoplan's allocators implement it, on LibTorch 1.13 (Debian 12)
// and 2.x (Debian 13's 2.6): the one place where the two differ for an allocator.
//
// 2.x made allocate() non-const and added a pure virtual copy_data() (used when a tensor's storage
// is cloned); 1.13 has allocate() const and no copy_data. An allocator derives from
// AllocatorBase<Itself> and defines `c10::DataPtr allocate_block(size_t) const` (const: state that
// changes lives in atomics, thread-locals or behind the allocator's own lock, as 1.13 required);
// copy_data is a plain memcpy (c10's default_copy_data), as c10's own CPU allocator does.
#pragma once

#include <c10/core/Allocator.h>
#include <torch/version.h>

#include <cstddef>

namespace memoplan::torch_ext {

template <typename Derived>
class AllocatorBase : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t bytes) override {
    return static_cast<const Derived*>(this)->allocate_block(bytes);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t bytes) const override {
    return static_cast<const Derived*>(this)->allocate_block(bytes);
  }
#endif
};

}  // namespace memoplan::torch_ext

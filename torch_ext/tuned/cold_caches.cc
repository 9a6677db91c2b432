#include "cold_caches.h"

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace memoplan::torch_ext::tuned {
namespace {

constexpr uintptr_t kLine = 64;  // the smallest line of the CPUs we run on: no line is skipped

#if defined(__x86_64__)
bool has_clflushopt() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 23)) != 0;
}
#endif

}  // namespace

void flush_from_caches(const void* data, size_t bytes) {
  if (bytes == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
#if defined(__x86_64__)
  static const bool optimized = has_clflushopt();
  if (optimized) {
    // Weakly ordered among themselves (several lines in flight); the fence orders them before
    // what follows.
    for (uintptr_t p = begin; p < end; p += kLine) {
      asm volatile("clflushopt (%0)" : : "r"(p) : "memory");
    }
  } else {
    for (uintptr_t p = begin; p < end; p += kLine)
      asm volatile("clflush (%0)" : : "r"(p) : "memory");
  }
  asm volatile("mfence" : : : "memory");
#elif defined(__aarch64__)
  // Linux lets user code clean and invalidate by address (SCTLR_EL1.UCI).
  for (uintptr_t p = begin; p < end; p += kLine) asm volatile("dc civac, %0" : : "r"(p) : "memory");
  asm volatile("dsb ish" : : : "memory");
#else
  (void)begin;
  (void)end;
#endif
}

}  // namespace memoplan::torch_ext::tuned

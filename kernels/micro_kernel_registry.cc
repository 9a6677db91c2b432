// Which micro-kernels this CPU can run: the ISA tables filtered by what cpuid says.
#include <cstdlib>
#include <string>

#include "micro_kernel.h"

namespace memoplan::kernels {
namespace {

// MEMOPLAN_KERNELS_ISA=generic|avx2|avx512 caps the instruction set (tests and benchmarks run
// the narrower kernels on a wider CPU that way).
Isa isa_cap() {
  const char* cap = std::getenv("MEMOPLAN_KERNELS_ISA");
  if (!cap) return Isa::kAvx512;
  const std::string text = cap;
  if (text == "generic") return Isa::kGeneric;
  if (text == "avx2") return Isa::kAvx2;
  return Isa::kAvx512;
}

}  // namespace

bool cpu_supports(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(isa_cap())) return false;
  switch (isa) {
    case Isa::kGeneric:
      return true;
#if MEMOPLAN_KERNELS_X86
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#else
    case Isa::kAvx2:
    case Isa::kAvx512:
      return false;  // not built off x86-64
#endif
  }
  return false;
}

Isa best_isa() {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (cpu_supports(isa)) return isa;
  }
  return Isa::kGeneric;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

#if !MEMOPLAN_KERNELS_X86
// Off x86-64 the x86 tables are empty (their files are not built; cpu_supports says no).
MicroKernelTable avx2_micro_kernels() { return {nullptr, 0}; }
MicroKernelTable avx512_micro_kernels() { return {nullptr, 0}; }
#endif

std::vector<MicroKernelInfo> available_micro_kernels() {
  std::vector<MicroKernelInfo> out;
  for (auto [isa, table] : {std::pair{Isa::kAvx512, avx512_micro_kernels()},
                            std::pair{Isa::kAvx2, avx2_micro_kernels()},
                            std::pair{Isa::kGeneric, generic_micro_kernels()}}) {
    if (!cpu_supports(isa)) continue;
    for (int i = 0; i < table.count; ++i) out.push_back(table.kernels[i].info);
  }
  return out;
}

const MicroKernel* find_micro_kernel(const MicroKernelInfo& info) {
  if (!cpu_supports(info.isa)) return nullptr;
  const MicroKernelTable table = info.isa == Isa::kAvx512 ? avx512_micro_kernels()
                                 : info.isa == Isa::kAvx2 ? avx2_micro_kernels()
                                                          : generic_micro_kernels();
  for (int i = 0; i < table.count; ++i) {
    const MicroKernelInfo& k = table.kernels[i].info;
    if (k.mr == info.mr && k.nr == info.nr) return &table.kernels[i];
  }
  return nullptr;
}

const MicroKernel* find_micro_kernel_for_nr(int nr) {
  for (const MicroKernelInfo& info : available_micro_kernels()) {
    if (info.nr == nr) return find_micro_kernel(info);
  }
  return nullptr;
}

}  // namespace memoplan::kernels

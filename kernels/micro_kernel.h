// The register-blocked inner loop of the GEMM: one mr x nr tile of C from a packed sliver of A
// (kc x mr, k-major: a[k * mr + r]) and one of B (kc x nr: b[k * nr + j]). One file per
// instruction set, each compiled with its own target flags, registers its shapes in a table.
#ifndef MEMOPLAN_KERNELS_MICRO_KERNEL_H_
#define MEMOPLAN_KERNELS_MICRO_KERNEL_H_

#include <cstdint>
#include <vector>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {

// c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0) + sum_k a[k * mr + r] * b[k * nr + j].
using MicroKernelFn = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                               bool accumulate);

struct MicroKernel {
  MicroKernelInfo info;
  MicroKernelFn run;
};

// Each instruction set's table (micro_kernel_<isa>.cc). Reading one executes nothing of that ISA.
struct MicroKernelTable {
  const MicroKernel* kernels;
  int count;
};
MicroKernelTable generic_micro_kernels();
MicroKernelTable avx2_micro_kernels();
MicroKernelTable avx512_micro_kernels();

// The kernel of that ISA and shape if the CPU can run it, else null.
const MicroKernel* find_micro_kernel(const MicroKernelInfo& info);
// A kernel the CPU can run with that nr (the packed B's panel width), the best ISA first.
const MicroKernel* find_micro_kernel_for_nr(int nr);
bool cpu_supports(Isa isa);

// The AVX2 implementation of a row function where this build has it and the CPU runs it, else
// the portable one. A macro because off x86-64 the AVX2 function is not built and must not be
// named.
#if MEMOPLAN_KERNELS_X86
#define MEMOPLAN_AVX2_OR_GENERIC(avx2, generic) (cpu_supports(Isa::kAvx2) ? (avx2) : (generic))
#else
#define MEMOPLAN_AVX2_OR_GENERIC(avx2, generic) (generic)
#endif

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_MICRO_KERNEL_H_

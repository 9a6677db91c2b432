// The affine + ReLU row (kernels/affine_relu.h): the AVX2 row gives the portable row's bytes,
// fused (one rounding) and not (two), over vector bodies and tails; ReLU keeps NaN and -0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "memoplan/kernels/affine_relu.h"

namespace memoplan::kernels {
namespace {

#if MEMOPLAN_KERNELS_X86
bool avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#endif

TEST(AffineRelu, RowsAgreeAcrossInstructionSets) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const int64_t n : {1, 7, 8, 9, 31, 64, 1001}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    const float a = normal(rng), b = normal(rng);
    for (const bool fused : {true, false}) {
      std::vector<float> generic(x.size()), chosen(x.size());
      affine_relu_row_generic(x.data(), generic.data(), n, a, b, fused);
      affine_relu_row()(x.data(), chosen.data(), n, a, b, fused);
      EXPECT_EQ(std::memcmp(generic.data(), chosen.data(), x.size() * sizeof(float)), 0)
          << "n " << n << " fused " << fused;
#if MEMOPLAN_KERNELS_X86
      if (avx2()) {
        std::vector<float> wide(x.size());
        affine_relu_row_avx2(x.data(), wide.data(), n, a, b, fused);
        EXPECT_EQ(std::memcmp(generic.data(), wide.data(), x.size() * sizeof(float)), 0)
            << "n " << n << " fused " << fused;
      }
#endif
      for (size_t j = 0; j < x.size(); ++j) {
        const float v = fused ? std::fma(x[j], a, b) : x[j] * a + b;  // no -mfma here: unfused
        EXPECT_EQ(generic[j], v > 0 ? v : 0.0f) << j;
      }
    }
  }
}

TEST(AffineRelu, KeepsNanAndNegativeZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(11, 0.0f);
  x[3] = nan;
  x[9] = nan;
  x[5] = -1.0f;
  for (const bool fused : {true, false}) {
    std::vector<float> y(x.size());
    affine_relu_row()(x.data(), y.data(), static_cast<int64_t>(x.size()), 1.0f, -0.0f, fused);
    EXPECT_TRUE(std::isnan(y[3]));
    EXPECT_TRUE(std::isnan(y[9]));
    EXPECT_EQ(y[5], 0.0f);
    // 0 * 1 + -0 is +0; 1 * -1 + -0 is -1, then 0.
    EXPECT_FALSE(std::signbit(y[0]));
    std::vector<float> z(x.size());
    std::vector<float> neg(x.size(), -0.0f);
    affine_relu_row()(neg.data(), z.data(), static_cast<int64_t>(x.size()), 1.0f, -0.0f, fused);
    EXPECT_TRUE(std::signbit(z[0])) << "-0 * 1 + -0 is -0, which ReLU keeps as aten's max does";
    EXPECT_TRUE(std::signbit(z[10]));
  }
}

}  // namespace
}  // namespace memoplan::kernels

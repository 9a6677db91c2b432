// SiLU in place (kernels/silu.h): every instruction set this CPU runs within 1e-6 of x / (1 +
// exp(-x)) computed in double, over vector bodies and tails; 0 stays 0, NaN stays NaN, +inf stays
// +inf, and -inf gives NaN in each (as aten's x / (1 + exp(-x))).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "memoplan/kernels/silu.h"

namespace memoplan::kernels {
namespace {

std::vector<std::pair<std::string, SiluFn>> implementations() {
  std::vector<std::pair<std::string, SiluFn>> all = {{"generic", silu_generic}, {"chosen", silu()}};
#if MEMOPLAN_KERNELS_X86
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    all.emplace_back("avx2", silu_avx2);
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) {
    all.emplace_back("avx512", silu_avx512);
  }
#endif
  return all;
}

TEST(Silu, EveryInstructionSetIsWithinItsBoundOfTheExactValue) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 6.0f);
  for (const int64_t n : {1, 7, 8, 9, 15, 16, 17, 1001, 4096}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    if (n == 4096) {  // a sweep over where exp saturates and beyond
      for (int64_t j = 0; j < n; ++j) x[static_cast<size_t>(j)] = -100.0f + 0.05f * j;
    }
    for (const auto& [name, fn] : implementations()) {
      std::vector<float> y = x;
      fn(y.data(), n);
      for (size_t j = 0; j < x.size(); ++j) {
        const double v = x[j], exact = v / (1.0 + std::exp(-v));
        EXPECT_NEAR(y[j], exact, 1e-6 * std::fabs(exact) + 1e-30)
            << name << " n " << n << " x " << x[j];
      }
    }
  }
}

TEST(Silu, ZeroNanAndInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [name, fn] : implementations()) {
    // In a vector body (the first 16) and in a tail (the last 5).
    std::vector<float> y = {0.0f, nan,  inf,  -inf, -0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                            0.0f, 0.0f, 0.0f, 0.0f, 0.0f,  0.0f, nan,  inf,  -inf, -0.0f};
    fn(y.data(), static_cast<int64_t>(y.size()));
    for (const size_t at : {size_t{0}, size_t{16}}) {
      EXPECT_EQ(y[at], 0.0f) << name;
      EXPECT_TRUE(std::isnan(y[at + 1])) << name;
      EXPECT_EQ(y[at + 2], inf) << name;
      EXPECT_TRUE(std::isnan(y[at + 3])) << name;
      EXPECT_EQ(y[at + 4], 0.0f) << name;
    }
    EXPECT_NEAR(y[5], 1.0 / (1.0 + std::exp(-1.0)), 1e-6) << name;
  }
}

}  // namespace
}  // namespace memoplan::kernels

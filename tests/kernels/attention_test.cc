// The attention softmax (each implementation this CPU runs) against a double-precision softmax,
// its IEEE edge cases, and kernels::attention_head against a double-precision attention on views
// into a fused QKV buffer (odd sizes, row strides, heads on several threads).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels_test_support.h"
#include "memoplan/kernels/attention.h"
#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {
namespace {

using testing::threads;

std::vector<std::pair<std::string, SoftmaxRowFn>> softmax_rows() {
  std::vector<std::pair<std::string, SoftmaxRowFn>> out{{"generic", softmax_row_generic}};
#if MEMOPLAN_KERNELS_X86
  if (best_isa() != Isa::kGeneric) out.emplace_back("avx2", softmax_row_avx2);
#endif
  return out;
}

std::vector<double> reference_softmax(const std::vector<float>& row, float scale) {
  double m = -INFINITY;
  for (float x : row) m = std::max(m, static_cast<double>(scale) * x);
  std::vector<double> out(row.size());
  double sum = 0;
  for (size_t j = 0; j < row.size(); ++j) sum += out[j] = std::exp(double{scale} * row[j] - m);
  for (double& x : out) x /= sum;
  return out;
}

TEST(Softmax, RowsMatchADoublePrecisionSoftmax) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-30.0f, 30.0f);
  for (const auto& [name, fn] : softmax_rows()) {
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 128, 129, 1000}) {
      for (float scale : {1.0f, 0.125f, 3.0f}) {
        std::vector<float> row(n);
        for (float& x : row) x = uniform(rng);
        const std::vector<double> want = reference_softmax(row, scale);
        fn(row.data(), n, scale);
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_NEAR(row[j], want[j], 1e-5 * want[j] + 1e-30)
              << name << " n " << n << " scale " << scale << " at " << j;
          sum += row[j];
        }
        EXPECT_NEAR(sum, 1.0, 1e-5) << name << " n " << n;
      }
    }
  }
}

TEST(Softmax, InfinitiesAndNaNsGiveWhatIeeeGives) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> rows{
      {-inf, 1, 2, -inf, 3, 4, 5, 6, 7, -inf},              // masked positions: exactly 0
      std::vector<float>(12, -inf),                         // all masked: NaN
      {1, 2, nan, 4, 5, 6, 7, 8, 9},                        // a NaN: NaNs
      {1, 2, inf, 4, 5, 6, 7, 8, 9},                        // +inf: NaNs (inf - inf)
      {-200, 0, -200, -200, -200, -200, -200, -200, -200},  // underflow to 0, not below
  };
  for (const std::vector<float>& source : rows) {
    std::vector<float> want = source;
    softmax_row_generic(want.data(), static_cast<int64_t>(want.size()), 1.0f);
    for (const auto& [name, fn] : softmax_rows()) {
      std::vector<float> got = source;
      fn(got.data(), static_cast<int64_t>(got.size()), 1.0f);
      for (size_t j = 0; j < got.size(); ++j) {
        if (std::isnan(want[j])) {
          EXPECT_TRUE(std::isnan(got[j])) << name << " at " << j;
        } else {
          EXPECT_NEAR(got[j], want[j], 1e-6f) << name << " at " << j;
          if (want[j] == 0.0f) {
            EXPECT_EQ(got[j], 0.0f) << name << " at " << j;
          }
        }
      }
    }
  }
  std::vector<float> masked = rows[0];
  softmax_row()(masked.data(), static_cast<int64_t>(masked.size()), 1.0f);
  EXPECT_EQ(masked[0], 0.0f);
  EXPECT_EQ(masked[3], 0.0f);
}

// A [tokens, 3 e] buffer as a fused QKV projection lays it out; head h's q, k and v are column
// blocks h d, e + h d and 2 e + h d.
struct Qkv {
  int64_t tokens, heads, d, e;
  std::vector<float> data;
  Qkv(int64_t tokens_, int64_t heads_, int64_t d_)
      : tokens(tokens_), heads(heads_), d(d_), e(heads_ * d_), data(tokens_ * 3 * heads_ * d_) {
    std::mt19937 rng(static_cast<unsigned>(tokens * 31 + d));
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    for (float& x : data) x = uniform(rng);
  }
  MatrixView part(int which, int64_t h) const {
    return {data.data() + which * e + h * d, tokens, d, 3 * e, 1};
  }
};

// Double-precision attention of one head into out (tokens x d, row stride ldo).
void reference_attention(const Qkv& x, int64_t h, float scale, std::vector<double>& out,
                         int64_t ldo) {
  const MatrixView q = x.part(0, h), k = x.part(1, h), v = x.part(2, h);
  for (int64_t i = 0; i < x.tokens; ++i) {
    std::vector<double> s(x.tokens);
    double m = -INFINITY;
    for (int64_t j = 0; j < x.tokens; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < x.d; ++c) {
        dot += double{q.data[i * q.row_stride + c]} * k.data[j * k.row_stride + c];
      }
      s[j] = scale * dot;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (double& p : s) sum += p = std::exp(p - m);
    for (int64_t c = 0; c < x.d; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < x.tokens; ++j) acc += s[j] / sum * v.data[j * v.row_stride + c];
      out[i * ldo + h * x.d + c] = acc;
    }
  }
}

TEST(Attention, HeadsMatchADoublePrecisionAttention) {
  for (auto [tokens, heads, d] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 4},
                                  {7, 3, 5},
                                  {33, 2, 16},
                                  {128, 2, 64},
                                  {130, 1, 24}}) {
    const Qkv x(tokens, heads, d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<double> want(tokens * x.e);
    for (int64_t h = 0; h < heads; ++h) reference_attention(x, h, scale, want, x.e);
    for (const GemmConfig& config : {default_config(), [] {
                                       GemmConfig small = default_config();
                                       small.kc = 8;  // K chunks and row blocks inside one head
                                       small.mc = small.kernel.mr * 2;
                                       return small;
                                     }()}) {
      std::vector<float> serial(tokens * x.e, -1.0f), parallel(tokens * x.e, -2.0f);
      for (int64_t h = 0; h < heads; ++h) {
        attention_head(x.part(0, h), x.part(1, h), x.part(2, h), scale, serial.data() + h * d, x.e,
                       config);
      }
      threads(3)(heads, [&](int64_t begin, int64_t end) {
        for (int64_t h = begin; h < end; ++h) {
          attention_head(x.part(0, h), x.part(1, h), x.part(2, h), scale, parallel.data() + h * d,
                         x.e, config);
        }
      });
      for (size_t i = 0; i < serial.size(); ++i) {
        // Outputs are convex combinations of v's entries (|v| <= 2).
        ASSERT_NEAR(serial[i], want[i], 2e-5)
            << tokens << "x" << heads << "x" << d << " at " << i << " " << config.to_string();
      }
      EXPECT_EQ(serial, parallel) << config.to_string();
    }
  }
}

TEST(Attention, MismatchedShapesAreRejected) {
  const Qkv x(8, 1, 4);
  std::vector<float> out(8 * 4);
  const MatrixView q = x.part(0, 0), k = x.part(1, 0);
  const MatrixView short_v{x.data.data(), 7, 4, 12, 1};
  const MatrixView wide_k{x.data.data(), 8, 5, 12, 1};
  EXPECT_THROW(attention_head(q, k, short_v, 1.0f, out.data(), 4, default_config()),
               std::invalid_argument);
  EXPECT_THROW(attention_head(q, wide_k, x.part(2, 0), 1.0f, out.data(), 4, default_config()),
               std::invalid_argument);
}

}  // namespace
}  // namespace memoplan::kernels

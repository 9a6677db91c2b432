// Winograd F(2x2, 3x3) on the blocked layout against plain loops in double precision: blocks of 8
// and 16 channels, channel counts that leave a block partly padding, odd and even sizes (edge
// tiles), one and several images, several blocks of tiles, bias and every post-op, serial and
// parallel; the padding channels of the output stay zero.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels_test_support.h"
#include "memoplan/kernels/winograd.h"

namespace memoplan::kernels::winograd {
namespace {

using testing::threads;

int64_t padded(int64_t channels, int block) { return (channels + block - 1) / block * block; }

// A blocked tensor with random values in the real channels and zeros in the padding.
std::vector<float> blocked(const Shape& s, int64_t channels, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t cp = padded(channels, s.block);
  std::vector<float> t(s.n * cp * s.h * s.w);
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t in_block = static_cast<int64_t>(i) % s.block;
    const int64_t block = static_cast<int64_t>(i) / (s.block * s.h * s.w) % (cp / s.block);
    t[i] = block * s.block + in_block < channels ? u(rng) : 0.f;
  }
  return t;
}

void check(const Shape& s, const std::vector<PostOp>& post, bool with_bias,
           const ParallelFor& parallel, const std::string& what) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::vector<float> in = blocked(s, s.c, rng);
  std::vector<float> weight(s.k * s.c * 9), bias(s.k);
  for (float& x : weight) x = u(rng);
  for (float& x : bias) x = u(rng);
  Shape out_shape = s;
  const std::vector<float> residual = blocked(out_shape, s.k, rng);
  std::vector<float> packed(packed_weights_floats(s));
  pack_weights(s, weight.data(), packed.data());
  const size_t out_floats = s.n * padded(s.k, s.block) * s.h * s.w;
  std::vector<float> got(out_floats, 77.f), want(out_floats);
  run(s, in.data(), packed.data(), with_bias ? bias.data() : nullptr, post, residual.data(),
      got.data(), parallel);
  reference(s, in.data(), weight.data(), with_bias ? bias.data() : nullptr, post, residual.data(),
            want.data());
  // The sums run over up to 9 C products of values in [-1, 1]: 1e-5 of that bound.
  const double tolerance = 1e-5 * (9.0 * s.c + 2.0);
  for (size_t i = 0; i < out_floats; ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance)
        << what << " at " << i << " (n " << s.n << " c " << s.c << " " << s.h << "x" << s.w << " k "
        << s.k << " block " << s.block << ")";
  }
}

TEST(Winograd, MatchesDirectConvolutionOnTheBlockedLayout) {
  for (int block : {8, 16}) {
    if (!available(block)) GTEST_SKIP() << "no AVX2 + FMA";
    const int64_t shapes[][5] = {// n, c, h, w, k
                                 {1, 8, 4, 4, 16},   {1, 5, 7, 7, 13},   {2, 16, 9, 6, 24},
                                 {1, 3, 1, 1, 8},    {1, 24, 5, 11, 40}, {3, 64, 14, 14, 64},
                                 {1, 32, 30, 30, 16}};
    for (const auto& d : shapes) {
      const Shape s{d[0], d[1], d[2], d[3], d[4], block};
      check(s, {}, true, {}, "plain");
    }
  }
}

// Scales per output channel (a batch norm folded as the weight is packed) give the packing of the
// folded weight, bit for bit.
TEST(Winograd, ScaledPackingIsThePackingOfTheScaledWeight) {
  const Shape s{1, 20, 6, 6, 40, 8, 1};
  std::vector<float> weight(static_cast<size_t>(s.k * s.c * 9)), scales(static_cast<size_t>(s.k));
  std::mt19937 random(11);
  std::uniform_real_distribution<float> value(-1.f, 1.f), scale(0.5f, 1.5f);
  for (float& w : weight) w = value(random);
  for (float& x : scales) x = scale(random);
  std::vector<float> folded = weight;
  for (size_t i = 0; i < folded.size(); ++i) folded[i] *= scales[i / (s.c * 9)];
  std::vector<float> a(packed_weights_floats(s)), b(packed_weights_floats(s));
  pack_weights(s, folded.data(), a.data());
  pack_weights(s, weight.data(), b.data(), scales.data());
  EXPECT_EQ(a, b);
}

TEST(Winograd, PostOpsInOrderAndNoBias) {
  if (!available(8)) GTEST_SKIP() << "no AVX2 + FMA";
  const Shape s{2, 20, 9, 10, 21, 8};
  using K = PostOp::Kind;
  check(s, {{K::kRelu, 0.f, 0.f}}, true, {}, "relu");
  check(s, {{K::kRelu, 0.1f, 0.f}}, false, {}, "leaky relu, no bias");
  check(s, {{K::kClip, 0.f, 6.f}}, true, {}, "relu6");
  check(s, {{K::kResidual, 0.f, 0.f}, {K::kRelu, 0.f, 0.f}}, true, {}, "residual then relu");
  check(s, {{K::kClip, 0.5f, 1.f}, {K::kResidual, 0.f, 0.f}}, true, {},
        "clip above zero (the padding must stay zero), then residual");
}

TEST(Winograd, ParallelBlocksGiveTheSerialResult) {
  if (!available(8)) GTEST_SKIP() << "no AVX2 + FMA";
  // 2 x 30 x 30 images: 450 tiles in blocks of at most 96, as many as a multiple of 3; a 7 x 7
  // image: 16 tiles in two blocks of 12 (one partly empty).
  Shape s{2, 16, 30, 30, 32, 8, 3};
  check(s, {{PostOp::Kind::kRelu, 0.f, 0.f}}, true, threads(3), "three threads");
  s = Shape{1, 64, 7, 7, 64, 8, 2};
  check(s, {{PostOp::Kind::kResidual, 0.f, 0.f}}, true, threads(2), "two threads, 7 x 7");
}

TEST(Winograd, PackedWeightsSize) {
  const Shape s{1, 5, 4, 4, 17, 8};
  EXPECT_EQ(packed_weights_floats(s), 16u * 8u * 32u);
}

}  // namespace
}  // namespace memoplan::kernels::winograd

// plan() with kernels "tuned" on transformer blocks: a fused encoder layer
// (torch._transformer_encoder_layer_fwd) on memoplan's GEMM within 1e-5 of aten's, measured cold
// without memory of its own, with a mask left to aten; nn.MultiheadAttention's fast path as
// memoplan::attention. The linears alone: tuned_kernels_test.cc.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <fstream>
#include <string>

#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

using testing::ChoiceGuard;
using testing::count_in_forward;
using testing::encoder;
using testing::relative_difference;
using testing::tuned;

TEST(TunedKernels, EncoderLayerOnMemoplanGemmMatchesAten) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  for (bool gelu : {false, true}) {
    for (bool norm_first : {false, true}) {
      torch::jit::Module reference = encoder(gelu, norm_first), planned = encoder(gelu, norm_first);
      c10::InferenceMode guard;
      const at::Tensor x = torch::randn({2, 10, 64});
      const at::Tensor expected = reference.forward({x}).toTensor();
      plan(planned, {x}, tuned());
      const KernelStats before = kernel_stats();
      for (int pass = 0; pass < 3; ++pass) {
        const at::Tensor got = planned.forward({x}).toTensor();
        ASSERT_EQ(got.sizes(), expected.sizes());
        EXPECT_LT(relative_difference(got, expected), 1e-5)
            << "gelu " << gelu << " norm_first " << norm_first;
      }
      EXPECT_EQ(kernel_stats().tuned_calls - before.tuned_calls, 3u);
    }
  }
}

TEST(TunedKernels, MeasuringAnEncoderLayerPicksASideAndStaysWithinTolerance) {
  // Measured with the layer's weights flushed from the caches before each timed call.
  torch::jit::Module reference = encoder(true, false), planned = encoder(true, false);
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({1, 9, 64});
  plan(planned, {x}, tuned());
  EXPECT_NE(kernel_report().find("encoder layer 1x9x64 heads"), std::string::npos)
      << kernel_report();
  EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
            1e-5);
}

TEST(TunedKernels, AColdMeasurementTakesNoMemoryOfItsOwn) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator keeps freed memory in quarantine";
#endif
  // Cold caches once meant reading a buffer of twice the last-level cache (up to 128 MiB) before
  // each timed call: it set the tuned copy's peak on a small transformer. Now the layer's weights
  // (plain and packed, 100 KiB here) leave the caches line by line.
  torch::jit::Module planned = encoder(true, false);
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({1, 13, 64});  // a shape no other test measures
  planned.forward({x});  // aten's own first-call allocations, outside the measured span
  if (!(std::ofstream("/proc/self/clear_refs") << "5")) GTEST_SKIP() << "cannot reset VmHWM";
  const int64_t before = testing::status_bytes("VmRSS:");
  plan(planned, {x}, tuned());
  ASSERT_NE(kernel_report().find("encoder layer 1x13x64 heads 4 gelu"), std::string::npos)
      << kernel_report();
  EXPECT_LT(testing::status_bytes("VmHWM:") - before, int64_t{16} << 20);
}

TEST(TunedKernels, EncoderLayerWithAMaskGoesToAten) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  torch::jit::Module reference = encoder(true, false), planned = encoder(true, false);
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({1, 6, 64});
  const at::Tensor mask = torch::zeros({1, 6}, at::kBool).index_put_({0, 5}, true);
  const int64_t padding_mask = 1;  // mask_type 1: a [batch, tokens] key padding mask
  plan(planned, {x, mask, padding_mask}, tuned());
  const KernelStats before = kernel_stats();
  EXPECT_TRUE(torch::equal(planned.forward({x, mask, padding_mask}).toTensor(),
                           reference.forward({x, mask, padding_mask}).toTensor()));
  EXPECT_EQ(kernel_stats().stock_calls - before.stock_calls, 1u);
}

// nn.MultiheadAttention's inference fast path (torchvision's ViT): self-attention, no mask, no
// weights asked for.
torch::jit::Module self_attention() {
  torch::manual_seed(0);
  torch::jit::Module m("SelfAttention");
  m.register_parameter("w", torch::randn({192, 64}) * 0.1, false);
  m.register_parameter("b", torch::randn({192}), false);
  m.register_parameter("pw", torch::randn({64, 64}) * 0.1, false);
  m.register_parameter("pb", torch::randn({64}), false);
  m.define(R"(
    def forward(self, x):
        y, w = torch._native_multi_head_attention(x, x, x, 64, 4, self.w, self.b, self.pw,
                                                  self.pb, None, False)
        return y + x
  )");
  m.eval();
  return m;
}

TEST(TunedKernels, MultiHeadAttentionRunsOnMemoplanWithinTolerance) {
  for (KernelChoice choice : {KernelChoice::kAlwaysMemoplan, KernelChoice::kMeasure}) {
    ChoiceGuard forced(choice);
    torch::jit::Module reference = self_attention(), planned = self_attention();
    c10::InferenceMode guard;
    const at::Tensor x = torch::randn({2, 17, 64});
    const at::Tensor expected = reference.forward({x}).toTensor();
    const KernelStats before = kernel_stats();
    plan(planned, {x}, tuned());
    EXPECT_EQ(count_in_forward(planned, "memoplan::attention"), 1);
    for (int pass = 0; pass < 3; ++pass) {
      EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), expected), 1e-5);
    }
    if (choice == KernelChoice::kAlwaysMemoplan) {
      EXPECT_GE(kernel_stats().tuned_calls - before.tuned_calls, 3u);
    } else {
      EXPECT_NE(kernel_report().find("attention 2x17x64 heads 4"), std::string::npos)
          << kernel_report();
    }
  }
}

}  // namespace
}  // namespace memoplan::torch_ext

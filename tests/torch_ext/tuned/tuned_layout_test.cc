// plan() with kernels "tuned" on convolutions and the other matrix products: every convolution
// runs as memoplan::conv2d in the layout the plan chose (pointwise ones on memoplan's GEMM where
// that measured faster), bmm / baddbmm / matmul / addmm as memoplan's ops; results within 1e-5
// of aten's, whatever layout the input comes in, and nothing outside the plan sees NHWC.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include "conv_weights.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

using testing::BlockedLayoutGuard;
using testing::ChoiceGuard;
using testing::relative_difference;
using testing::tuned;

// A small residual CNN: a 3x3 stem, pointwise convolutions with and without bias, an in-place
// and an out-of-place residual add, a strided pointwise and a depthwise convolution, pooling and
// a classifier; plus a 4-d output and (`view`: for NCHW inputs) a view of an activation, uses
// that must see NCHW.
torch::jit::Module cnn(bool view) {
  torch::manual_seed(1);
  torch::jit::Module m("Cnn");
  m.register_parameter("stem", torch::randn({16, 3, 3, 3}) * 0.2, false);
  m.register_parameter("pw1", torch::randn({32, 16, 1, 1}) * 0.2, false);
  m.register_parameter("pw1_b", torch::randn({32}), false);
  m.register_parameter("pw2", torch::randn({16, 32, 1, 1}) * 0.2, false);
  m.register_parameter("down", torch::randn({24, 16, 1, 1}) * 0.2, false);
  m.register_parameter("dw", torch::randn({24, 1, 3, 3}) * 0.2, false);
  m.register_parameter("bn_w", torch::rand({16}) + 0.5, false);
  m.register_parameter("bn_b", torch::randn({16}), false);
  m.register_buffer("bn_mean", torch::randn({16}) * 0.1);
  m.register_buffer("bn_var", torch::rand({16}) + 0.5);
  m.register_parameter("fc", torch::randn({10, 24}) * 0.2, false);
  m.register_attribute("use_view", c10::BoolType::get(), view);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.define(R"(
    def forward(self, x):
        h = torch.conv2d(x, self.stem, None, [1, 1], [1, 1])
        h = torch.batch_norm(h, self.bn_w, self.bn_b, self.bn_mean, self.bn_var, self.training, 0.1, 1e-5, False)
        h = torch.relu(h)
        r = torch.relu(torch.conv2d(h, self.pw1, self.pw1_b))
        r = torch.conv2d(r, self.pw2)
        r += h
        s = r + torch.conv2d(r, self.pw2[:, :16].contiguous())
        d = torch.conv2d(s, self.down, None, [2, 2])
        d = torch.conv2d(d, self.dw, None, [1, 1], [1, 1], [1, 1], 24)
        flat = d.view(d.size(0), -1) if self.use_view else d.reshape(d.size(0), -1)
        p = torch.flatten(torch.adaptive_avg_pool2d(d, [1, 1]), 1)
        return torch.linear(p, self.fc), d, flat.sum()
  )");
  m.eval();
  return m;
}

void expect_same(const c10::IValue& got, const c10::IValue& want, int pass) {
  const auto g = got.toTuple()->elements();
  const auto w = want.toTuple()->elements();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const at::Tensor a = g[i].toTensor(), b = w[i].toTensor();
    ASSERT_EQ(a.sizes(), b.sizes());
    EXPECT_LT(relative_difference(a, b), 1e-5) << "output " << i << ", pass " << pass;
    EXPECT_TRUE(a.is_contiguous()) << "output " << i << " left the plan in NHWC";
  }
}

void check_cnn(const at::Tensor& x) {
  const bool view = x.is_contiguous();  // stock's view fails on a channels-last input
  torch::jit::Module reference = cnn(view), planned = cnn(view);
  c10::InferenceMode guard;
  const c10::IValue expected = reference.forward({x});
  const PlanSummary summary = plan(planned, {x}, tuned());
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 4; ++pass) expect_same(planned.forward({x}), expected, pass);
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.planned_hits, 4 * summary.planned_tensors);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
}

TEST(TunedLayouts, MeasuredLayoutsMatchStock) {
  BlockedLayoutGuard plain_layouts(false);  // the NCHW / NHWC plan
  at::set_num_threads(1);
  check_cnn(torch::randn({2, 3, 20, 20}));
  EXPECT_NE(kernel_report().find("layout plan"), std::string::npos) << kernel_report();
}

TEST(TunedLayouts, GemmConvolutionsMatchStockForBothInputLayouts) {
  BlockedLayoutGuard plain_layouts(false);  // the NCHW / NHWC plan
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  at::set_num_threads(1);
  const KernelStats before = kernel_stats();
  check_cnn(torch::randn({2, 3, 17, 19}));
  check_cnn(torch::randn({3, 3, 12, 12}).contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_GT(kernel_stats().tuned_calls, before.tuned_calls);
}

TEST(TunedLayouts, AtenOnlyStillPlansLayouts) {
  BlockedLayoutGuard plain_layouts(false);  // the NCHW / NHWC plan
  ChoiceGuard always(KernelChoice::kAlwaysAten);
  check_cnn(torch::randn({1, 3, 16, 16}));
}

// The batch norm after the stem is folded into its weights: a statistic or weight changed in place
// (load_state_dict copies in place) is folded again; in training mode the pair runs as aten's,
// updating the running statistics as it would.
TEST(TunedLayouts, ChangedWeightsAreFoldedAgainAndTrainingModeRunsStock) {
  BlockedLayoutGuard plain_layouts(false);  // the NCHW / NHWC plan
  at::set_num_threads(1);
  torch::jit::Module reference = cnn(true), planned = cnn(true);
  const at::Tensor x = torch::randn({2, 3, 16, 16});
  {
    c10::InferenceMode guard;
    plan(planned, {x}, tuned());
  }
  for (torch::jit::Module* m : {&reference, &planned}) {
    torch::NoGradGuard no_grad;
    m->attr("bn_mean").toTensor().add_(0.25);
    m->attr("stem").toTensor().mul_(1.5);
  }
  {
    c10::InferenceMode guard;
    expect_same(planned.forward({x}), reference.forward({x}), 0);
  }
  reference.train();
  planned.train();
  torch::NoGradGuard no_grad;
  expect_same(planned.forward({x}), reference.forward({x}), 1);
  EXPECT_TRUE(planned.attr("bn_mean").toTensor().equal(reference.attr("bn_mean").toTensor()));
}

// The same graph in oneDNN's blocked layout (blocked/): every convolution of the cnn takes it,
// batch norm and activations fused; results within 1e-5 whatever the input's layout, and what
// leaves the region (outputs, the view) is NCHW again.
// A site that keeps packings only holds no folded copy of a weight with a batch norm; folding anew
// gives the kept copy's values bit for bit, and the folded bias either way.
TEST(TunedLayouts, AFoldedWeightNotKeptIsFoldedAgainExactly) {
  torch::manual_seed(4);
  const at::Tensor weight = torch::randn({8, 4, 3, 3});
  const c10::optional<at::Tensor> bias = torch::randn({8});
  const conv::BatchNorm bn{torch::rand({8}) + 0.5, torch::randn({8}), torch::randn({8}),
                           torch::rand({8}) + 0.1, 1e-5};
  const conv::Geometry g{{1, 1}, {1, 1}, {1, 1}, 1};
  const int64_t kept_site = 1 << 20, packings_site = kept_site + 1;  // sites no graph uses
  const auto kept = conv::weights(kept_site, weight, bias, &bn, g, conv::Keep::kFolded);
  const auto lean = conv::weights(packings_site, weight, bias, &bn, g, conv::Keep::kPackingsOnly);
  ASSERT_TRUE(kept->weight.defined());
  EXPECT_FALSE(lean->weight.defined());
  EXPECT_TRUE(torch::equal(conv::folded_weight(*lean, weight, &bn), kept->weight));
  EXPECT_TRUE(torch::equal(*lean->bias, *kept->bias));
  // Without a batch norm the weight is the convolution's own, kept either way (no copy).
  const auto plain =
      conv::weights(packings_site + 1, weight, bias, nullptr, g, conv::Keep::kPackingsOnly);
  EXPECT_TRUE(plain->weight.is_same(weight));
}

TEST(TunedLayouts, BlockedLayoutMatchesStock) {
  BlockedLayoutGuard blocked(true);
  at::set_num_threads(1);
  check_cnn(torch::randn({2, 3, 20, 20}));
  check_cnn(torch::randn({1, 3, 13, 15}).contiguous(at::MemoryFormat::ChannelsLast));
  if (!testing::onednn_off_here().empty()) GTEST_SKIP() << testing::onednn_off_here();
  ASSERT_NE(kernel_report().find("blocked layout (oneDNN"), std::string::npos) << kernel_report();
  EXPECT_NE(kernel_report().find("5 convolutions"), std::string::npos) << kernel_report();
}

TEST(TunedLayouts, TwoThreadsShareTheMeasurements) {
  BlockedLayoutGuard plain_layouts(false);  // the NCHW / NHWC plan
  at::set_num_threads(2);
  check_cnn(torch::randn({2, 3, 24, 24}));
  at::set_num_threads(1);
}

torch::jit::Module products() {
  torch::manual_seed(2);
  torch::jit::Module m("Products");
  m.register_parameter("w", torch::randn({40, 24}) * 0.2, false);
  m.register_parameter("b", torch::randn({24}), false);
  m.define(R"(
    def forward(self, q, k, mask, x):
        scores = torch.baddbmm(mask, q, k.transpose(1, 2))
        context = torch.bmm(torch.softmax(scores, -1), k)
        heads = torch.matmul(q.view(2, 3, 9, 16), k.view(2, 3, 9, 16).transpose(2, 3))
        projected = torch.matmul(x, self.w)
        affine = torch.addmm(self.b, x.view(-1, 40), self.w)
        other = torch.matmul(x[0, 0], self.w)
        return context, heads, projected, affine, other
  )");
  m.eval();
  return m;
}

void check_products() {
  torch::jit::Module reference = products(), planned = products();
  c10::InferenceMode guard;
  const std::vector<c10::IValue> inputs = {torch::randn({6, 9, 16}), torch::randn({6, 9, 16}),
                                           torch::randn({1, 9, 9}), torch::randn({2, 5, 40})};
  const c10::IValue expected = reference.forward(inputs);
  plan(planned, inputs, tuned());
  for (int pass = 0; pass < 3; ++pass) expect_same(planned.forward(inputs), expected, pass);
}

TEST(TunedMatmul, ProductsMatchAtenOnMemoplansGemm) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  at::set_num_threads(1);
  const KernelStats before = kernel_stats();
  check_products();
  // Per pass: baddbmm, bmm, the 4-d matmul, the weight matmul and addmm on memoplan's GEMM (the
  // vector-matrix matmul is aten's).
  EXPECT_GE(kernel_stats().tuned_calls - before.tuned_calls, 5u * 3);
}

TEST(TunedMatmul, ProductsMatchAtenWhenMeasured) {
  at::set_num_threads(1);
  check_products();
  EXPECT_NE(kernel_report().find("baddbmm"), std::string::npos) << kernel_report();
}

}  // namespace
}  // namespace memoplan::torch_ext

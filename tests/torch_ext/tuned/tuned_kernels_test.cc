// plan() with kernels "tuned": aten::linear (with a relu, gelu or hardswish after it) runs as
// memoplan::linear on memoplan's GEMM, within 1e-5 of aten's results, planned like any other op;
// weights changed in place are repacked; autograd and unknown settings fall back or are refused.
// The same products on oneDNN's matmul (tuned::project's other side), its strides and epilogue.
// Encoder layers and attention: tuned_encoder_test.cc.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/onednn/onednn.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

torch::jit::Module mlp() {
  torch::manual_seed(0);
  torch::jit::Module m("Mlp");
  m.register_parameter("w1", torch::randn({96, 64}) * 0.1, false);
  m.register_parameter("b1", torch::randn({96}), false);
  m.register_parameter("w2", torch::randn({80, 96}) * 0.1, false);
  m.register_parameter("b2", torch::randn({80}), false);
  m.register_parameter("w3", torch::randn({64, 80}) * 0.1, false);
  m.define(R"(
    def forward(self, x):
        h = torch.relu(torch.linear(x, self.w1, self.b1))
        h = torch.gelu(torch.linear(h, self.w2, self.b2))
        y = torch.hardswish_(torch.linear(h, self.w3))
        return y + x
  )");
  m.eval();
  return m;
}

int count_kind(const torch::jit::Module& m, const char* kind) {
  return testing::count_in_forward(m, kind);
}

using testing::ChoiceGuard;
using testing::count_in_forward;
using testing::encoder;
using testing::OptionsGuard;
using testing::relative_difference;
using testing::tuned;

TEST(TunedKernels, MemoplanGemmMatchesAtenAndIsPlanned) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  at::set_num_threads(1);
  torch::jit::Module reference = mlp(), planned = mlp();
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({2, 7, 64});
  const at::Tensor expected = reference.forward({x}).toTensor();
  const PlanSummary summary = plan(planned, {x}, tuned());
  const KernelStats kernels_before = kernel_stats();
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 5; ++pass) {
    const at::Tensor got = planned.forward({x}).toTensor();
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_LT(relative_difference(got, expected), 1e-5) << "pass " << pass;
  }
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(kernel_stats().tuned_calls - kernels_before.tuned_calls, 15u);  // 3 linears x 5
  // Each activation in its linear's epilogue.
  for (const char* kind : {"aten::relu", "aten::gelu", "aten::hardswish_", "aten::linear"}) {
    EXPECT_EQ(count_kind(planned, kind), 0) << kind;
  }
  EXPECT_EQ(d.planned_hits, 5 * summary.planned_tensors);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
}

TEST(TunedKernels, AlwaysAtenGivesTheStockResultBitForBit) {
  ChoiceGuard always(KernelChoice::kAlwaysAten);
  torch::jit::Module reference = mlp(), planned = mlp();
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({5, 64});
  const at::Tensor expected = reference.forward({x}).toTensor();
  plan(planned, {x}, tuned());
  EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), expected));
}

TEST(TunedKernels, MeasuringPicksASideForEveryShapeAndStaysWithinTolerance) {
  torch::jit::Module reference = mlp(), planned = mlp();
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({33, 64});
  const KernelStats before = kernel_stats();
  plan(planned, {x}, tuned());
  EXPECT_GE(kernel_stats().shapes_tuned - before.shapes_tuned, 1u);
  EXPECT_NE(kernel_report().find("linear 33x64x96 relu +bias"), std::string::npos)
      << kernel_report();
  EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
            1e-5);
}

// A product of one or two rows (a classifier at batch 1 or 2) is timed cold against
// kernels::gemv on the plain weight, whichever packed side won warm; either way within 1e-5.
TEST(TunedKernels, AProductOfAFewRowsIsTimedColdAgainstGemv) {
  at::set_num_threads(1);
  for (const int64_t rows : {1, 2}) {
    torch::jit::Module reference = mlp(), planned = mlp();
    c10::InferenceMode guard;
    const at::Tensor x = torch::randn({rows, 64});
    plan(planned, {x}, tuned());
    const std::string report = kernel_report();
    for (const std::string& product : {"product " + std::to_string(rows) + "x64x96 relu +bias",
                                       "product " + std::to_string(rows) + "x80x64 hardswish"}) {
      const size_t at = report.find(product);
      ASSERT_NE(at, std::string::npos) << product << "\n" << report;
      EXPECT_NE(report.substr(at, report.find('\n', at) - at).find("; cold: gemv "),
                std::string::npos)
          << report;
    }
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT_LT(
          relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
          1e-5);
    }
  }
  // The same shape on a weight as stored and on a transposed one (x @ W): the choice is the
  // shape's, and gemv reads only contiguous weight rows.
  torch::manual_seed(3);
  torch::jit::Module m("SameShape");
  m.register_parameter("w", torch::randn({96, 64}) * 0.1, false);
  m.register_parameter("wt", torch::randn({64, 96}) * 0.1, false);
  m.define(R"(
    def forward(self, x):
        return torch.linear(x, self.w) + torch.matmul(x, self.wt)
  )");
  m.eval();
  torch::jit::Module reference = m.clone();
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({1, 64});
  plan(m, {x}, tuned());
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_LT(relative_difference(m.forward({x}).toTensor(), reference.forward({x}).toTensor()),
              1e-5);
  }
}

TEST(TunedKernels, AWeightChangedInPlaceIsRepacked) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  torch::jit::Module reference = mlp(), planned = mlp();
  const at::Tensor x = torch::randn({4, 64});
  const KernelStats before = kernel_stats();
  {
    c10::InferenceMode guard;
    plan(planned, {x}, tuned());
  }
  EXPECT_EQ(kernel_stats().weights_packed - before.weights_packed, 3u);
  {
    torch::NoGradGuard no_grad;  // what load_state_dict does: copy into the same storage
    for (auto* m : {&reference, &planned}) m->attr("w2").toTensor().mul_(-2.0);
  }
  c10::InferenceMode guard;
  EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
            1e-5);
  EXPECT_EQ(kernel_stats().weights_packed - before.weights_packed, 4u) << "w2 repacked once";
}

// A module loaded in inference mode (what a C++ server's c10::InferenceMode around
// torch::jit::load makes) holds inference tensors, without version counters: its linears run on
// memoplan all the same, and forget_module() after a change in place repacks them.
TEST(TunedKernels, AModuleMadeInInferenceModeRunsOnMemoplan) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = mlp(), planned = mlp();
  ASSERT_TRUE(planned.attr("w1").toTensor().is_inference());
  const at::Tensor x = torch::randn({2, 7, 64});
  plan(planned, {x}, tuned());
  const KernelStats before = kernel_stats();
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_LT(
        relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
        1e-5);
  }
  EXPECT_EQ(kernel_stats().tuned_calls - before.tuned_calls, 9u);  // 3 linears x 3
  EXPECT_EQ(kernel_stats().stock_calls, before.stock_calls);
  for (auto* m : {&reference, &planned}) m->attr("w2").toTensor().mul_(-2.0);
  forget_module(planned);
  EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
            1e-5);
}

TEST(TunedKernels, AutogradGetsAtenAndItsGradients) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  torch::jit::Module reference = mlp(), planned = mlp();
  {
    c10::InferenceMode guard;
    plan(planned, {torch::randn({3, 64})}, tuned());
  }
  const at::Tensor x = torch::randn({3, 64});
  const at::Tensor xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
  planned.forward({xa}).toTensor().sum().backward();
  reference.forward({xb}).toTensor().sum().backward();
  ASSERT_TRUE(xa.grad().defined());
  EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), 1e-5, 1e-6));
}

TEST(TunedKernels, ConcurrentThreadsMeasureAndRunOneModule) {
  torch::jit::Module reference = mlp(), planned = mlp();
  c10::InferenceMode outer;
  const at::Tensor x = torch::randn({16, 64});
  plan(planned, {x}, tuned());
  const at::Tensor expected = reference.forward({x}).toTensor();
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      at::set_num_threads(1);
      c10::InferenceMode guard;
      const at::Tensor input = t % 2 ? x : torch::randn({9, 64});  // a new shape: measured
      const at::Tensor want = t % 2 ? expected : at::Tensor();
      for (int pass = 0; pass < 10; ++pass) {
        const at::Tensor got = planned.forward({input}).toTensor();
        if (want.defined() && relative_difference(got, want) > 1e-5) ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// tuned::project's side for new shapes until the end of the scope.
struct GemmSideGuard : OptionsGuard {
  explicit GemmSideGuard(GemmSide side) {
    set([side](KernelOptions& o) { o.gemm = side; });
  }
};

TEST(TunedKernels, OneDnnMatmulHonoursStridesBiasAndPostOps) {
  if (!testing::onednn_off_here().empty()) GTEST_SKIP() << testing::onednn_off_here();
  torch::manual_seed(3);
  const int64_t m = 5, k = 40, n = 24, lda = 48, ldc = 30;
  const at::Tensor a = torch::randn({m, lda});
  const at::Tensor w = (torch::randn({k, n}) * 0.2).t();  // N x K with strides (1, N)
  const at::Tensor bias = torch::randn({n});
  const at::Tensor before = torch::randn({m, ldc});
  const onednn::PostOp sum{onednn::kResidualSum};
  const onednn::PostOp relu{static_cast<int>(onednn::Eltwise::kRelu)};
  const onednn::PostOp gelu{static_cast<int>(onednn::Eltwise::kGelu)};
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const auto& post : std::vector<std::vector<onednn::PostOp>>{{}, {relu}, {sum, gelu}}) {
      const auto matmul = onednn::matmul({m, k, n, lda, ldc, true, post});
      at::Tensor packed =
          at::empty({static_cast<int64_t>(matmul->packed_weights_bytes())}, at::kByte);
      matmul->pack_weights(w.data_ptr<float>(), w.stride(0), w.stride(1), packed.data_ptr());
      at::Tensor scratch =
          at::empty({static_cast<int64_t>(matmul->scratchpad_bytes()) + 1}, at::kByte);
      at::Tensor out = before.clone();
      // The first call at two threads also measures its thread choice: several runs, one sum.
      matmul->run(a.data_ptr<float>(), packed.data_ptr(), bias.data_ptr<float>(),
                  out.data_ptr<float>(), scratch.data_ptr());
      at::Tensor want = at::linear(a.slice(1, 0, k), w, bias);
      if (post.size() == 1) want = at::relu(want);
      if (post.size() == 2) want = at::gelu(want + before.slice(1, 0, n));
      EXPECT_LT(relative_difference(out.slice(1, 0, n), want), 1e-5)
          << "threads " << threads << " post-ops " << post.size() << " "
          << matmul->implementation();
      EXPECT_TRUE(torch::equal(out.slice(1, n, ldc), before.slice(1, n, ldc)));  // past N
    }
  }
  at::set_num_threads(1);
}

TEST(TunedKernels, LinearsAndEncoderLayersOnOneDnnMatchAten) {
  ChoiceGuard always(KernelChoice::kAlwaysMemoplan);
  GemmSideGuard side(GemmSide::kOneDnn);
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    {
      torch::jit::Module reference = mlp(), planned = mlp();
      c10::InferenceMode guard;
      const at::Tensor x = torch::randn({21, 80}).slice(1, 0, 64);  // rows 80 floats apart
      const at::Tensor expected = reference.forward({x}).toTensor();
      plan(planned, {x}, tuned());
      const KernelStats before = kernel_stats();
      for (int pass = 0; pass < 3; ++pass) {
        EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), expected), 1e-5)
            << "threads " << threads;
      }
      EXPECT_EQ(kernel_stats().tuned_calls - before.tuned_calls, 9u);
    }
    for (bool norm_first : {false, true}) {
      torch::jit::Module reference = encoder(true, norm_first), planned = encoder(true, norm_first);
      c10::InferenceMode guard;
      const at::Tensor x = torch::randn({2, 10, 64});
      const at::Tensor expected = reference.forward({x}).toTensor();
      plan(planned, {x}, tuned());
      for (int pass = 0; pass < 3; ++pass) {
        EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), expected), 1e-5)
            << "threads " << threads << " norm_first " << norm_first;
      }
    }
  }
  at::set_num_threads(1);
}

TEST(TunedKernels, MeasuringReportsTheSideOfEveryProduct) {
  GemmSideGuard side(GemmSide::kOneDnn);  // measured against aten, the product on oneDNN's side
  torch::jit::Module reference = mlp(), planned = mlp();
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({13, 64});
  plan(planned, {x}, tuned());
  const std::string report = kernel_report();
  const char* side_taken = onednn::block_size() > 0 ? "-> oneDNN" : "-> memoplan";
  // Whatever the intra-op default (LibTorch 2.x: one per core).
  EXPECT_NE(report.find("product 13x64x96 relu +bias threads "), std::string::npos) << report;
  EXPECT_NE(report.find(side_taken), std::string::npos) << report;
  EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()),
            1e-5);
}

// Linears written out as products: x @ w.t() + b (traced from old code, or by hand), b + h @ w
// (GPT-2's Conv1D keeps w as [in, out]), and a product plus something that is not its bias vector.
torch::jit::Module written_out_linears() {
  torch::manual_seed(0);
  torch::jit::Module m("WrittenOut");
  m.register_parameter("w1", torch::randn({96, 64}) * 0.1, false);
  m.register_parameter("b1", torch::randn({96}), false);
  m.register_parameter("w2", torch::randn({96, 80}) * 0.1, false);
  m.register_parameter("b2", torch::randn({80}), false);
  m.register_parameter("w3", torch::randn({64, 80}) * 0.1, false);
  m.register_parameter("s", torch::randn({1}), false);
  m.define(R"(
    def forward(self, x):
        h = torch.matmul(x, self.w1.t()) + self.b1
        h = self.b2 + torch.matmul(h, self.w2)
        y = torch.matmul(h, self.w3.t()) + self.s
        return y + x
  )");
  m.eval();
  return m;
}

TEST(TunedKernels, AProductPlusItsBiasRunsAsOneLinear) {
  for (KernelChoice choice : {KernelChoice::kAlwaysMemoplan, KernelChoice::kMeasure}) {
    ChoiceGuard forced(choice);
    torch::jit::Module reference = written_out_linears(), planned = written_out_linears();
    c10::InferenceMode guard;
    const at::Tensor x = torch::randn({2, 7, 64});
    const at::Tensor expected = reference.forward({x}).toTensor();
    plan(planned, {x}, tuned());
    const int fused = count_in_forward(planned, "memoplan::matmul_add");
    const int products = count_in_forward(planned, "memoplan::matmul");
    const int adds = count_in_forward(planned, "aten::add");
    // The third product's addend is a one-element weight, not its bias vector: the fused op
    // checks the shapes when it runs, so the rewrite takes it too, and it runs as written.
    EXPECT_EQ(fused, 3);
    EXPECT_EQ(products, 0);
    EXPECT_EQ(adds, 1);  // y + x
    for (int pass = 0; pass < 3; ++pass) {
      EXPECT_LT(relative_difference(planned.forward({x}).toTensor(), expected), 1e-5);
    }
  }
}

// The options' names as the CLI and Python give them: each known name, and nothing else.
TEST(TunedKernels, OnlyTheOptionsNamesAreRead) {
  EXPECT_EQ(parse_kernels("tuned"), Kernels::kTuned);
  EXPECT_EQ(parse_kernels("stock"), Kernels::kStock);
  EXPECT_EQ(parse_memory("min"), Memory::kMin);
  EXPECT_EQ(parse_memory("offset"), Memory::kOffset);
  EXPECT_FALSE(parse_kernels("fastest"));
  EXPECT_FALSE(parse_kernels("Tuned"));
  EXPECT_FALSE(parse_memory("minimal"));
  EXPECT_STREQ(name(Kernels::kTuned), "tuned");
  EXPECT_STREQ(name(Memory::kMin), "min");
}

}  // namespace
}  // namespace memoplan::torch_ext

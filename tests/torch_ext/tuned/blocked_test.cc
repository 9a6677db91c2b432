// plan() with kernels "tuned" in oneDNN's blocked layout (tuned/blocked/): the blocks of the CNNs
// the issue names, written as torchvision scripts them (ResNet's basic block with max pooling,
// MobileNetV2's inverted residual with ReLU6 and 24 channels (not a multiple of the block),
// MobileNetV3's hardswish and hardsigmoid squeeze-excitation, EfficientNet's SiLU block with its
// stochastic-depth If), against aten: results within 1e-5 at batch 1 and 2, one and two intra-op
// threads, NCHW and channels-last inputs; the memory plan still serves every tensor. Also the
// cases the pass must leave alone or convert: an in-place op whose input is read afterwards, a
// batch norm in training mode, a use outside the region.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <atomic>
#include <thread>
#include <vector>

#include "blocked/blocked.h"
#include "blocked/onednn.h"
#include "layout_plan.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

using testing::BlockedLayoutGuard;
using testing::relative_difference;
using testing::tuned;

void add_conv(torch::jit::Module& m, const std::string& name, int64_t out, int64_t in, int64_t k,
              bool bias = false) {
  m.register_parameter(name, torch::randn({out, in, k, k}) * (1.0 / std::sqrt(in * k * k)), false);
  if (bias) m.register_parameter(name + "_b", torch::randn({out}) * 0.1, false);
}

void add_bn(torch::jit::Module& m, const std::string& name, int64_t c) {
  m.register_parameter(name + "_w", torch::rand({c}) + 0.5, false);
  m.register_parameter(name + "_b", torch::randn({c}) * 0.1, false);
  m.register_buffer(name + "_m", torch::randn({c}) * 0.1);
  m.register_buffer(name + "_v", torch::rand({c}) + 0.5);
}

// Every block of the issue's CNNs in one module.
torch::jit::Module blocks() {
  torch::manual_seed(3);
  torch::jit::Module m("Blocks");
  add_conv(m, "stem", 32, 3, 3);
  add_bn(m, "stem_bn", 32);
  add_conv(m, "c1", 32, 32, 3);  // ResNet basic block
  add_bn(m, "bn1", 32);
  add_conv(m, "c2", 32, 32, 3);
  add_bn(m, "bn2", 32);
  add_conv(m, "expand", 72, 32, 1);  // MobileNetV2: expand, depthwise (ReLU6), project to 24
  add_bn(m, "bn3", 72);
  add_conv(m, "dw", 72, 1, 3);
  add_bn(m, "bn4", 72);
  add_conv(m, "project", 24, 72, 1);
  add_bn(m, "bn5", 24);
  add_conv(m, "expand2", 24, 24, 1);  // a residual of 24 channels
  add_bn(m, "bn6", 24);
  add_conv(m, "se1", 8, 24, 1, true);  // MobileNetV3 squeeze-excitation, hardswish
  add_conv(m, "se2", 24, 8, 1, true);
  add_conv(m, "dw2", 24, 1, 5);
  add_bn(m, "bn7", 24);
  add_conv(m, "se3", 6, 24, 1, true);  // EfficientNet: SiLU, sigmoid gate, stochastic depth
  add_conv(m, "se4", 24, 6, 1, true);
  add_conv(m, "head", 40, 24, 1);
  m.register_parameter("fc", torch::randn({10, 40}) * 0.1, false);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.define(R"(
    def bn(self, x, w, b, mean, var):
        return torch.batch_norm(x, w, b, mean, var, self.training, 0.1, 1e-5, False)

    def forward(self, x):
        h = torch.relu_(self.bn(torch.conv2d(x, self.stem, None, [2, 2], [1, 1]), self.stem_bn_w, self.stem_bn_b, self.stem_bn_m, self.stem_bn_v))
        h = torch.max_pool2d(h, [3, 3], [2, 2], [1, 1], [1, 1], True)
        identity = h
        out = torch.relu(self.bn(torch.conv2d(h, self.c1, None, [1, 1], [1, 1]), self.bn1_w, self.bn1_b, self.bn1_m, self.bn1_v))
        out = self.bn(torch.conv2d(out, self.c2, None, [1, 1], [1, 1]), self.bn2_w, self.bn2_b, self.bn2_m, self.bn2_v)
        out += identity
        h = torch.relu(out)
        e = torch.hardtanh(self.bn(torch.conv2d(h, self.expand), self.bn3_w, self.bn3_b, self.bn3_m, self.bn3_v), 0.0, 6.0)
        e = torch.hardtanh_(self.bn(torch.conv2d(e, self.dw, None, [1, 1], [1, 1], [1, 1], 72), self.bn4_w, self.bn4_b, self.bn4_m, self.bn4_v), 0.0, 6.0)
        p = self.bn(torch.conv2d(e, self.project), self.bn5_w, self.bn5_b, self.bn5_m, self.bn5_v)
        q = torch.hardswish(self.bn(torch.conv2d(p, self.expand2), self.bn6_w, self.bn6_b, self.bn6_m, self.bn6_v))
        s = torch.adaptive_avg_pool2d(q, [1, 1])
        s = torch.hardsigmoid(torch.conv2d(torch.relu(torch.conv2d(s, self.se1, self.se1_b)), self.se2, self.se2_b))
        q = s * q
        r = p + q
        d = torch.silu(self.bn(torch.conv2d(r, self.dw2, None, [1, 1], [2, 2], [1, 1], 24), self.bn7_w, self.bn7_b, self.bn7_m, self.bn7_v))
        g = torch.sigmoid(torch.conv2d(torch.silu(torch.conv2d(torch.adaptive_avg_pool2d(d, [1, 1]), self.se3, self.se3_b)), self.se4, self.se4_b))
        d = d * g
        if self.training:
            d = d * torch.bernoulli(torch.full([d.size(0), 1, 1, 1], 0.8)) / 0.8
        r = d + r
        t = torch.avg_pool2d(r, [2, 2], [2, 2], [0, 0], False, False)
        u = torch.relu(torch.conv2d(t, self.head))
        feature = torch.flatten(torch.adaptive_avg_pool2d(u, [1, 1]), 1)
        return torch.linear(feature, self.fc), u
  )");
  m.eval();
  return m;
}

void expect_close(const c10::IValue& got, const c10::IValue& want, const std::string& what) {
  const auto g = got.toTuple()->elements();
  const auto w = want.toTuple()->elements();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const at::Tensor a = g[i].toTensor(), b = w[i].toTensor();
    ASSERT_EQ(a.sizes(), b.sizes()) << what;
    EXPECT_LT(relative_difference(a, b), 1e-5) << "output " << i << ", " << what;
    EXPECT_TRUE(a.is_contiguous()) << "output " << i << " left the region blocked, " << what;
  }
}

// The CPU's features, never the product's own report: on a CPU that has them, a blocked path
// switched off fails the tests below (their checks of the report) instead of skipping them.
bool blocked_layout_here() { return testing::cpu_has_avx2_fma(); }

void check_blocks(const at::Tensor& x, int threads) {
  at::set_num_threads(threads);
  torch::jit::Module reference = blocks(), planned = blocks();
  c10::InferenceMode guard;
  const c10::IValue expected = reference.forward({x});
  const PlanSummary summary = plan(planned, {x}, tuned());
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 3; ++pass) {
    expect_close(planned.forward({x}), expected,
                 "pass " + std::to_string(pass) + ", input " + c10::str(x.sizes()) + ", " +
                     std::to_string(threads) + " threads");
  }
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.planned_hits, 3 * summary.planned_tensors);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
  at::set_num_threads(1);
}

TEST(BlockedLayout, TorchvisionBlocksMatchStock) {
  BlockedLayoutGuard on(true);
  const KernelStats before = kernel_stats();
  check_blocks(torch::randn({1, 3, 64, 64}), 1);
  if (!blocked_layout_here()) GTEST_SKIP() << "no blocked layout on this CPU";
  // 13 convolutions; fused: 8 batch norms, 12 activations and ResNet's residual addition.
  EXPECT_NE(kernel_report().find("13 convolutions (21 batch norms / activations / residual "
                                 "additions fused)"),
            std::string::npos)
      << kernel_report();
  EXPECT_GE(kernel_stats().tuned_calls - before.tuned_calls, 3u * 13);
  check_blocks(torch::randn({2, 3, 57, 61}), 1);
  check_blocks(torch::randn({2, 3, 64, 64}).contiguous(at::MemoryFormat::ChannelsLast), 1);
#if !defined(__SANITIZE_THREAD__)
  // Two intra-op threads. Not under ThreadSanitizer: aten's own OpenMP regions in the reference
  // pass (libgomp is not instrumented) show as races there, and that build makes the extension's
  // splits serial anyway (torch_ext/CMakeLists.txt).
  check_blocks(torch::randn({2, 3, 48, 48}), 2);
#endif
}

// A residual that dies at its convolution is written over in place (oneDNN's sum): the output
// takes its bytes. One read later (an output) is not, nor the caller's input; whatever layouts
// the plan measured (every forced layout below as well as its own choice); at two threads the
// thread count is measured on a copy of it (the sum is not idempotent).
TEST(BlockedLayout, ADyingResidualIsWrittenOverInPlace) {
  BlockedLayoutGuard on(true);
  torch::manual_seed(5);
  torch::jit::Module m("Residuals");
  for (const char* name : {"a", "b", "c", "d", "e"}) add_conv(m, name, 32, 32, 3);
  m.define(R"(
    def forward(self, x):
        h = torch.relu(torch.conv2d(x, self.a, None, [1, 1], [1, 1]))
        t = torch.relu(torch.conv2d(h, self.b, None, [1, 1], [1, 1]))
        y = torch.relu(torch.conv2d(t, self.c, None, [1, 1], [1, 1]) + h)
        v = torch.relu(torch.conv2d(y, self.d, None, [1, 1], [1, 1]) + t)
        w = torch.relu(torch.conv2d(v, self.e, None, [1, 1], [1, 1]) + y) + x
        return w, y
  )");
  m.eval();
  torch::jit::Module reference = m.clone();
  // oneDNN's convolutions throughout: memoplan's Winograd (no sum) could win a 3x3 on timing.
  struct Restore {
    WinogradChoice was;
    ~Restore() { set_winograd(was); }
  } restore{set_winograd(WinogradChoice::kNever)};
  struct Unforce {
    int was;
    ~Unforce() { layouts::force_layout(layouts::kLayouts, was); }
  } unforce{layouts::force_layout(layouts::kLayouts, -1)};
  for (const int forced : {-1, int{layouts::kNchw}, int{layouts::kNhwc}, int{layouts::kBlocked}})
    for (int threads : {1, 2}) {
#if defined(__SANITIZE_THREAD__)
      if (threads > 1) break;  // aten's OpenMP regions in the reference pass: see above
#endif
      layouts::force_layout(layouts::kLayouts, forced);
      at::set_num_threads(threads);
      const std::string what =
          std::to_string(threads) + " threads, layout " +
          (forced < 0 ? "planned" : layouts::to_string(layouts::Layout(forced)));
      torch::jit::Module planned = m.clone();
      c10::InferenceMode guard;
      const at::Tensor x = torch::randn({1, 32, 20, 20}), kept = x.clone();
      const c10::IValue expected = reference.forward({x});
      plan(planned, {x}, tuned());
      if (!blocked_layout_here()) GTEST_SKIP() << "no blocked layout on this CPU";
      const KernelStats before = kernel_stats();
      for (int pass = 0; pass < 3; ++pass) {
        expect_close(planned.forward({x}), expected, what);
      }
      EXPECT_TRUE(torch::equal(x, kept)) << "the caller's input was written over: " << what;
      // h and t die at their residual additions: written over, themselves or the copy a conversion
      // to the convolution's layout made. y is read after (an output): never itself, only such a
      // copy where the plan converts it (the measured layouts decide; y's values are checked
      // above). x stays with aten's addition outside the region.
      const uint64_t in_place = kernel_stats().residuals_in_place - before.residuals_in_place;
      EXPECT_GE(in_place, 3u * 2) << what << "\n" << kernel_report();
      EXPECT_LE(in_place, 3u * 3) << what << "\n" << kernel_report();
    }
  at::set_num_threads(1);
}

// Inference threads on one planned module run the same primitives at once: each call that finds
// a primitive's bound arguments taken binds its own (onednn_common.h, BoundArgs), and every
// thread's outputs stay the stock ones.
TEST(BlockedLayout, ConcurrentThreadsShareThePrimitives) {
  BlockedLayoutGuard on(true);
  at::set_num_threads(1);
  torch::jit::Module reference = blocks(), planned = blocks();
  c10::InferenceMode outer;
  const at::Tensor x = torch::randn({1, 3, 40, 40});
  const c10::IValue expected = reference.forward({x});
  plan(planned, {x}, tuned());
  planned.forward({x});
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      at::set_num_threads(1);
      c10::InferenceMode guard;
      for (int pass = 0; pass < 15; ++pass) {
        const auto got = planned.forward({x}).toTuple()->elements();
        const auto want = expected.toTuple()->elements();
        for (size_t i = 0; i < got.size(); ++i) {
          if (relative_difference(got[i].toTensor(), want[i].toTensor()) > 1e-5) ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// ResNet's two 3x3 convolutions (batch norm and ReLU; batch norm, residual and ReLU in the
// epilogue) on memoplan's Winograd F(2x2, 3x3), then on oneDNN's Winograd, instead of oneDNN's
// direct kernels: the same results at odd and even sizes, one and two threads; measured, it
// reports the times.
TEST(BlockedLayout, WinogradConvolutionsMatchStock) {
  BlockedLayoutGuard on(true);
  const WinogradChoice was = set_winograd(WinogradChoice::kAlways);
  check_blocks(torch::randn({1, 3, 64, 64}), 1);
  if (!blocked_layout_here()) {
    set_winograd(was);
    GTEST_SKIP() << "no blocked layout on this CPU";
  }
  const bool ran = kernel_report().find("memoplan:winograd_f2x3") != std::string::npos;
  check_blocks(torch::randn({2, 3, 57, 61}), 1);
#if !defined(__SANITIZE_THREAD__)
  check_blocks(torch::randn({2, 3, 48, 48}), 2);
#endif
  // oneDNN's Winograd (AVX-512 only), residual additions included, then all three measured.
  set_winograd(WinogradChoice::kOneDnn);
  check_blocks(torch::randn({1, 3, 36, 36}), 1);
#if !defined(__SANITIZE_THREAD__)
  check_blocks(torch::randn({2, 3, 44, 44}), 2);
#endif
  const bool onednn_ran = kernel_report().find("wino_2x3") != std::string::npos;
  set_winograd(WinogradChoice::kMeasure);
  check_blocks(torch::randn({1, 3, 40, 40}), 1);
  set_winograd(was);
  ASSERT_TRUE(ran) << "memoplan's Winograd did not run on a CPU with AVX2 + FMA:\n"
                   << kernel_report();
  EXPECT_NE(kernel_report().find("conv3x3 1x32x11x11 -> 32 threads 1: "), std::string::npos)
      << kernel_report();
  EXPECT_NE(kernel_report().find("oneDNN direct"), std::string::npos) << kernel_report();
  if (onednn_ran) {  // then measured too
    EXPECT_NE(kernel_report().find("oneDNN winograd "), std::string::npos) << kernel_report();
  }
}

// The training branch (stochastic depth, batch norms updating their statistics) runs on aten
// through plain tensors and gives aten's results.
TEST(BlockedLayout, TrainingModeRunsAsAten) {
  BlockedLayoutGuard on(true);
  torch::jit::Module reference = blocks(), planned = blocks();
  const at::Tensor x = torch::randn({2, 3, 32, 32});
  {
    c10::InferenceMode guard;
    plan(planned, {x}, tuned());
  }
  reference.train();
  planned.train();
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const c10::IValue want = reference.forward({x});
  torch::manual_seed(5);
  expect_close(planned.forward({x}), want, "training");
  EXPECT_TRUE(planned.attr("bn1_m").toTensor().allclose(reference.attr("bn1_m").toTensor()));
}

// relu_ overwrites h, which is read again after it: the pass must not run it out of place.
// A view of an activation and a scalar product leave the region through memoplan::to_plain.
TEST(BlockedLayout, InPlaceReadLaterAndForeignUses) {
  BlockedLayoutGuard on(true);
  auto make = [] {
    torch::manual_seed(4);
    torch::jit::Module m("Edges");
    m.register_parameter("w", torch::randn({24, 8, 3, 3}) * 0.2, false);
    m.register_parameter("v", torch::randn({24, 24, 1, 1}) * 0.2, false);
    m.define(R"(
      def forward(self, x):
          h = torch.conv2d(x, self.w, None, [1, 1], [1, 1])
          y = torch.relu_(h)
          z = torch.conv2d(y, self.v) + h
          w = z * 0.5
          return w.view(w.size(0), -1), torch.conv2d(z, self.v).sum(dim=1, keepdim=True), z.size(1)
    )");
    m.eval();
    return m;
  };
  torch::jit::Module reference = make(), planned = make();
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({2, 8, 9, 9});
  const auto want = reference.forward({x}).toTuple()->elements();
  plan(planned, {x}, tuned());
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = planned.forward({x}).toTuple()->elements();
    EXPECT_LT(relative_difference(got[0].toTensor(), want[0].toTensor()), 1e-5);
    EXPECT_LT(relative_difference(got[1].toTensor(), want[1].toTensor()), 1e-5);
    EXPECT_EQ(got[2].toInt(), 24);
  }
}

// A blocked activation carries a tag after its values: the region's ops tell what the region made
// from a plain tensor of the same sizes, even one whose strides look alike (C = 32, a multiple of
// the block, has NCHW's strides), a copy, or a view, and compute on each in its own layout.
TEST(BlockedLayout, TheRegionOpsTellABlockedActivationFromAPlainOne) {
  if (!blocked_layout_here()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  c10::InferenceMode guard;
  using onednn::Format;
  for (int64_t c : {32, 24}) {
    const at::Tensor plain = torch::randn({2, c, 5, 7});
    const at::Tensor b = blocked::to_blocked(plain);
    EXPECT_TRUE(blocked::is_blocked(b)) << c;
    EXPECT_EQ(blocked::format_of(b), Format::kBlocked) << c;
    EXPECT_TRUE(blocked::to_plain(b).equal(plain)) << c;
    const onednn::PostOp relu{static_cast<int>(onednn::Eltwise::kRelu)};
    const at::Tensor r = blocked::eltwise(b, {relu});  // a region op's output is tagged too
    EXPECT_TRUE(blocked::is_blocked(r)) << c;
    EXPECT_TRUE(blocked::to_plain(r).equal(plain.relu())) << c;
    EXPECT_FALSE(blocked::is_blocked(plain)) << c;
    EXPECT_FALSE(blocked::is_blocked(b.clone())) << c;
    EXPECT_FALSE(blocked::is_blocked(b.narrow(0, 1, 1))) << c;
    EXPECT_FALSE(blocked::is_blocked(plain.contiguous(at::MemoryFormat::ChannelsLast))) << c;
    // A plain tensor is read as what it is: NCHW stays itself, NHWC converts.
    EXPECT_EQ(blocked::to_plain(plain).data_ptr(), plain.data_ptr()) << c;
    const at::Tensor nhwc = plain.contiguous(at::MemoryFormat::ChannelsLast);
    EXPECT_EQ(blocked::format_of(nhwc), Format::kNhwc) << c;
    EXPECT_TRUE(blocked::to_plain(nhwc).equal(plain)) << c;
    EXPECT_TRUE(blocked::to_plain(blocked::to_blocked(nhwc)).equal(plain)) << c;
    // Every op in every layout: the result in its input's layout, aten's values.
    for (const at::Tensor& x : {plain, nhwc, b}) {
      const Format f = blocked::format_of(x);
      const at::Tensor e = blocked::eltwise(x, {relu});
      EXPECT_EQ(blocked::format_of(e), f) << c;
      EXPECT_TRUE(blocked::to_plain(e).equal(plain.relu())) << c;
      const at::Tensor p = blocked::pool(x, {false, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, true});
      EXPECT_EQ(blocked::format_of(p), f) << c;
      EXPECT_TRUE(blocked::to_plain(p).equal(at::max_pool2d(plain, {3, 3}, {2, 2}, {1, 1})));
      const at::Tensor g = blocked::adaptive_avg_pool(x, {1, 1});
      EXPECT_LT(relative_difference(blocked::to_plain(g), at::adaptive_avg_pool2d(plain, {1, 1})),
                1e-6);
      // A squeeze-excitation product and a residual sum, the result in each layout.
      for (const Format out : {Format::kNchw, Format::kNhwc, Format::kBlocked}) {
        const at::Tensor m = blocked::binary(x, g, onednn::BinaryKind::kMul, {}, out);
        EXPECT_EQ(blocked::format_of(m), out) << c;
        EXPECT_LT(relative_difference(blocked::to_plain(m),
                                      plain * at::adaptive_avg_pool2d(plain, {1, 1})),
                  1e-6);
        const at::Tensor s = blocked::binary(x, b, onednn::BinaryKind::kAdd, {relu}, out);
        EXPECT_TRUE(blocked::to_plain(s).equal((plain + plain).relu())) << c;
      }
      // Written back into an activation of each layout.
      at::Tensor target = blocked::convert(torch::zeros_like(plain), f);
      blocked::write_into(target, plain * 2);
      EXPECT_TRUE(blocked::to_plain(target).equal(plain * 2)) << c;
    }
    // An empty batch is a blocked activation too.
    EXPECT_TRUE(blocked::is_blocked(blocked::to_blocked(torch::randn({0, c, 5, 7}))));
  }
}

// The region's layouts are planned (blocked while the first pass measures; then each activation
// NCHW, NHWC or blocked as measured), and every layout forced on the whole region gives stock's
// results: each op of the region runs on each layout, with the conversions the layouts need.
TEST(BlockedLayout, EveryRegionLayoutMatchesStock) {
  BlockedLayoutGuard on(true);
  check_blocks(torch::randn({1, 3, 64, 64}), 1);
  if (!blocked_layout_here()) GTEST_SKIP() << "no blocked layout on this CPU";
  EXPECT_NE(kernel_report().find("layout plan (graph "), std::string::npos) << kernel_report();
  EXPECT_NE(kernel_report().find(" blocked; modelled "), std::string::npos) << kernel_report();
  EXPECT_NE(kernel_report().find("NCHW->blocked "), std::string::npos) << kernel_report();
  for (const layouts::Layout forced : {layouts::kNchw, layouts::kNhwc, layouts::kBlocked}) {
    const int was = layouts::force_layout(layouts::kLayouts, forced);
    check_blocks(torch::randn({2, 3, 40, 36}), 1);
    check_blocks(torch::randn({1, 3, 32, 32}).contiguous(at::MemoryFormat::ChannelsLast), 1);
    layouts::force_layout(layouts::kLayouts, was);
  }
}

// What a RecordFunction observer (torch.profiler) sees of a tuned model: each of memoplan's
// operators as a user scope of its name, its arguments when asked (the convolution's input
// first). Observed, the plan still serves every tensor: the planner's shadow stack watches
// function scopes only.
struct Seen {
  std::string name;
  std::vector<int64_t> first_sizes;
};
std::vector<Seen>& seen() {
  static std::vector<Seen> s;
  return s;
}
std::unique_ptr<at::ObserverContext> on_user_scope(const at::RecordFunction& fn) {
  Seen s{fn.name(), {}};
#ifdef NDEBUG
  // Without NDEBUG (the sanitizer builds) inputs() checks a flag that Debian's libtorch, built
  // with NDEBUG, never sets.
  const auto inputs = fn.inputs();
  if (!inputs.empty() && inputs[0].isTensor()) s.first_sizes = inputs[0].toTensor().sizes().vec();
#endif
  seen().push_back(std::move(s));
  return nullptr;
}

TEST(BlockedLayout, TheProfilerSeesMemoplansOps) {
  BlockedLayoutGuard on(true);
  const at::Tensor x = torch::randn({1, 3, 32, 32});
  torch::jit::Module planned = blocks();
  c10::InferenceMode guard;
  plan(planned, {x}, tuned());
  for (int pass = 0; pass < 2; ++pass) planned.forward({x});
  if (!blocked_layout_here()) GTEST_SKIP() << "no blocked layout on this CPU";
  seen().clear();
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(&on_user_scope)
                                     .needsInputs(true)
                                     .scopes({at::RecordScope::USER_SCOPE}));
  const PlanStats before = plan_stats();
  planned.forward({x});
  const PlanStats d = plan_stats() - before;
  at::removeCallback(handle);
  int convolutions = 0;
  bool stem = false;
  for (const Seen& s : seen()) {
    if (s.name != "memoplan::bconv") continue;
    ++convolutions;
    stem = stem || s.first_sizes == x.sizes().vec();
  }
  EXPECT_EQ(convolutions, 13);
#ifdef NDEBUG
  EXPECT_TRUE(stem) << "the stem convolution's input was not among the arguments seen";
#else
  (void)stem;
#endif
  EXPECT_GT(d.planned_hits, 0u);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
}

}  // namespace
}  // namespace memoplan::torch_ext

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
#include <oneapi/dnnl/dnnl_version.h>
#include <torch/script.h>

#include <atomic>
#include <thread>
#include <vector>

#include "blocked/blocked.h"
#include "blocked/winograd_conv.h"
#include "blocked_test_support.h"
#include "layout_plan.h"
#include "memoplan/onednn/onednn.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

using testing::BlockedLayoutGuard;
using testing::OptionsGuard;
using testing::relative_difference;
using testing::tuned;
using namespace blocked_test;

TEST(BlockedLayout, TorchvisionBlocksMatchStock) {
  BlockedLayoutGuard on(true);
  const KernelStats before = kernel_stats();
  check_blocks(torch::randn({1, 3, 64, 64}), 1);
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
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
  OptionsGuard options;
  options.set([](KernelOptions& o) { o.winograd = WinogradChoice::kNever; });
  const std::pair<RegionLayout, const char*> region_layouts[] = {
      {RegionLayout::kPlanned, "planned"},
      {RegionLayout::kNchw, "NCHW"},
      {RegionLayout::kNhwc, "NHWC"},
      {RegionLayout::kBlocked, "blocked"}};
  for (const auto& [forced, name] : region_layouts)
    for (int threads : {1, 2}) {
#if defined(__SANITIZE_THREAD__)
      if (threads > 1) break;  // aten's OpenMP regions in the reference pass: see above
#endif
      options.set([forced = forced](KernelOptions& o) { o.region_layout = forced; });
      at::set_num_threads(threads);
      const std::string what = std::to_string(threads) + " threads, layout " + name;
      torch::jit::Module planned = m.clone();
      c10::InferenceMode guard;
      const at::Tensor x = torch::randn({1, 32, 20, 20}), kept = x.clone();
      const c10::IValue expected = reference.forward({x});
      plan(planned, {x}, tuned());
      if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
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

// A convolution resolves its primitive, packing and bias once per site (blocked_ops.cc): the
// passes after plan() run what their first call resolved, with stock's outputs; a weight changed
// in place is packed again and its new values read; plan() again (a census) and forget_module()
// resolve afresh, and nothing resolved keeps a form the caches dropped.
TEST(BlockedLayout, ConvolutionsRunWhatTheirSiteResolvedUntilTheirWeightsChange) {
  BlockedLayoutGuard on(true);
  at::set_num_threads(1);
  torch::jit::Module reference = blocks(), planned = blocks();
  const at::Tensor x = torch::randn({1, 3, 40, 40});
  struct Calls {  // convolutions a primitive ran, and of them those that ran what was resolved
    uint64_t run = 0, resolved = 0;
  };
  auto passes = [&](int n, const char* what) {
    c10::InferenceMode guard;
    const KernelStats before = kernel_stats();
    for (int pass = 0; pass < n; ++pass) {
      expect_close(planned.forward({x}), reference.forward({x}), what);
    }
    const KernelStats after = kernel_stats();
    return Calls{after.convolutions_run - before.convolutions_run,
                 after.convolutions_resolved - before.convolutions_resolved};
  };
  {
    c10::InferenceMode guard;
    plan(planned, {x}, tuned());
  }
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
  passes(1, "first pass after plan()");  // resolves
  const Calls per_pass = passes(1, "second pass");
  EXPECT_GE(per_pass.resolved, 10u) << kernel_report();  // 13 convolutions, a few may stay on aten
  EXPECT_EQ(per_pass.resolved, per_pass.run) << kernel_report();
  EXPECT_EQ(passes(3, "three passes").resolved, 3 * per_pass.resolved);
  // Whether every convolution a primitive runs runs resolved again within four passes (forms made
  // anew in a pass move the generation: its later calls resolve afresh, the next pass keeps them).
  // Against the pass's own calls, not per_pass: a layout plan measured again (forget_module) may
  // put another convolution on aten, timings being what they are (CI's ASan runs did).
  auto settles = [&](const char* what) {
    Calls last;
    for (int pass = 0; pass < 4; ++pass) {
      last = passes(1, what);
      if (last.run > 0 && last.resolved == last.run) return true;
    }
    ADD_FAILURE() << what << ": the last pass resolved " << last.resolved << " of " << last.run
                  << " convolutions\n"
                  << kernel_report();
    return false;
  };
  {
    torch::NoGradGuard no_grad;
    for (torch::jit::Module* m : {&reference, &planned}) {
      m->attr("project").toTensor().mul_(-0.5);
      m->attr("bn1_w").toTensor().add_(0.25);
    }
  }
  // The first pass packs the two changed sites again (their sources' versions moved): fewer calls
  // run resolved; within a few passes all of them again, with the new values.
  EXPECT_LT(passes(1, "changed weights").resolved, per_pass.resolved);
  EXPECT_TRUE(settles("changed weights, again"));
  {
    c10::InferenceMode guard;
    plan(planned, {x}, tuned());  // a census: every resolved call goes
  }
  EXPECT_EQ(passes(1, "first pass after plan() again").resolved, 0u);
  EXPECT_EQ(passes(1, "then").resolved, per_pass.resolved);
  const int64_t before = tuned::packed_bytes(-1);
  forget_module(planned);
  EXPECT_LT(tuned::packed_bytes(-1), before);
  EXPECT_TRUE(settles("forgotten: made again on use, then resolved"));
  // The same where the plan measured again differs from the first (every activation NHWC here):
  // whatever runs on a primitive runs resolved once it settles.
  forget_module(planned);
  OptionsGuard options;
  options.set([](KernelOptions& o) { o.region_layout = RegionLayout::kNhwc; });
  EXPECT_TRUE(settles("forgotten, then planned NHWC"));
}

// One thread alternating between two input shapes (two pass keys, each with its own layout plan
// and measurements, as a server alternating requests): every pass of either shape runs each
// convolution as its own key's plan resolved it, with stock's results.
TEST(BlockedLayout, AThreadAlternatingShapesRunsEachShapesOwnPlan) {
  BlockedLayoutGuard on(true);
  at::set_num_threads(1);
  torch::jit::Module reference = blocks(), planned = blocks();
  const at::Tensor small = torch::randn({1, 3, 40, 40}), large = torch::randn({2, 3, 33, 37});
  {
    c10::InferenceMode guard;
    plan(planned, {small}, tuned());
    plan(planned, {large}, tuned());
  }
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
  c10::InferenceMode guard;
  auto pass = [&](const at::Tensor& x, const std::string& what) {
    const KernelStats before = kernel_stats();
    expect_close(planned.forward({x}), reference.forward({x}), what);
    return kernel_stats().convolutions_resolved - before.convolutions_resolved;
  };
  for (int warm = 0; warm < 2; ++warm) {
    pass(small, "warm, small");
    pass(large, "warm, large");
  }
  const uint64_t per_small = pass(small, "small"), per_large = pass(large, "large");
  EXPECT_GE(per_small, 10u) << kernel_report();
  EXPECT_GE(per_large, 10u) << kernel_report();
  for (int round = 0; round < 4; ++round) {
    EXPECT_EQ(pass(small, "alternating, small"), per_small);
    EXPECT_EQ(pass(large, "alternating, large"), per_large);
  }
}

// ResNet's two 3x3 convolutions (batch norm and ReLU; batch norm, residual and ReLU in the
// epilogue) on memoplan's Winograd F(2x2, 3x3), then on oneDNN's Winograd, instead of oneDNN's
// direct kernels: the same results at odd and even sizes, one and two threads; measured, it
// reports the times.
TEST(BlockedLayout, TheCensusForgetsOnlyPrimitivesMadeAndNotAskedForSince) {
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
  // Shapes no other test makes: the caches are the process's.
  auto spec = [](int64_t c) {
    onednn::ConvSpec s;
    s.n = 1;
    s.c = c;
    s.h = s.w = 7;
    s.out_channels = 24;
    s.kh = s.kw = 3;
    s.padding[0] = s.padding[1] = 1;
    return s;
  };
  const auto before = onednn::conv(spec(40));  // made before the census began: kept
  const uint64_t first = onednn::next_primitive_epoch();
  const auto unused = onednn::conv(spec(48));  // made in it, not asked for in its last epoch
  const auto asked = onednn::conv(spec(56));   // made in it and asked for again in its last epoch
  const uint64_t last = onednn::next_primitive_epoch();
  EXPECT_EQ(onednn::conv(spec(56)), asked);
  EXPECT_EQ(onednn::conv(spec(40)), before);
  onednn::forget_primitives(first, last);
  EXPECT_EQ(onednn::conv(spec(40)), before);
  EXPECT_EQ(onednn::conv(spec(56)), asked);
  const auto remade = onednn::conv(spec(48));
  EXPECT_NE(remade, unused) << "a primitive the last epoch did not ask for stayed cached";
  EXPECT_EQ(remade->output().c, unused->output().c);
}

// A batch norm folded in as the weight is packed (oneDNN's reorder with per-output-channel scales,
// memoplan's Winograd transform) packs exactly what packing the folded copy does: dense, 1x1,
// grouped, depthwise and, where oneDNN has it, its Winograd (on oneDNN 2, in chunks of output
// channels, each folded and reordered on its own: against the whole weight's one reorder here).
TEST(BlockedLayout, PackingWithScalesIsPackingTheFoldedWeight) {
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
  struct Case {
    int64_t c, out, k, groups;
    bool winograd;
    int64_t side = 9;
  };
  int scaled = 0, sliced = 0, winograd_made = 0, winograd_sliced = 0;
  // 64 -> 528 3x3 and 1024 -> 1040 1x1: over kPackingSliceBytes, packed in slices where the
  // layout allows; 256 -> 256 and 512 -> 512 at 14x14 and 7x7: resnet18's Winograd layers (oneDNN's
  // 2x3 and 4x3 layouts), 40 -> 72 and 256 -> 200: output channels the layout pads.
  for (const Case& t :
       {Case{32, 48, 3, 1, false}, Case{24, 40, 1, 1, false}, Case{32, 64, 3, 4, false},
        Case{32, 32, 3, 32, false}, Case{64, 64, 3, 1, true}, Case{64, 528, 3, 1, false},
        Case{1024, 1040, 1, 1, false}, Case{256, 256, 3, 1, true, 14},
        Case{512, 512, 3, 1, true, 7}, Case{128, 128, 3, 1, true, 28}, Case{40, 72, 3, 1, true, 12},
        Case{256, 200, 3, 1, true, 14}, Case{256, 256, 3, 1, true, 28}}) {
    onednn::ConvSpec s;
    s.n = 1;
    s.c = t.c;
    s.h = s.w = t.side;
    s.out_channels = t.out;
    s.kh = s.kw = t.k;
    s.groups = t.groups;
    s.padding[0] = s.padding[1] = t.k / 2;
    s.winograd = t.winograd;
    std::shared_ptr<const onednn::Conv> conv;
    try {
      conv = onednn::conv(s);
    } catch (const std::exception&) {
      ASSERT_TRUE(t.winograd) << "oneDNN made no direct convolution for case " << scaled;
      continue;  // no Winograd of oneDNN's on this CPU
    }
    winograd_made += t.winograd ? 1 : 0;
    const at::Tensor weight = torch::randn({t.out, t.c / t.groups, t.k, t.k});
    const at::Tensor scales = torch::rand({t.out}) + 0.5;
    const at::Tensor folded = (weight * scales.view({-1, 1, 1, 1})).contiguous();
    const auto bytes = static_cast<int64_t>(conv->packed_weights_bytes());
    at::Tensor from_folded = torch::zeros({bytes}, at::kByte);
    at::Tensor from_scales = torch::zeros({bytes}, at::kByte);
    ASSERT_TRUE(conv->pack_weights(folded.data_ptr<float>(), from_folded.data_ptr(), nullptr, {}));
    int64_t rows_packed = 0, slices = 0;
    if (!conv->pack_weights(weight.data_ptr<float>(), from_scales.data_ptr(),
                            scales.data_ptr<float>(), [&](int64_t first, int64_t count) {
                              EXPECT_EQ(first, rows_packed);
                              rows_packed += count;
                              ++slices;
                            })) {
      EXPECT_TRUE(t.winograd && DNNL_VERSION_MAJOR >= 3)
          << conv->implementation() << " cannot scale as it packs";
      EXPECT_EQ(from_scales.count_nonzero().item<int64_t>(), 0) << "wrote before refusing";
      continue;
    }
    ++scaled;
    sliced += slices > 1 ? 1 : 0;
    winograd_sliced += t.winograd && slices > 1 ? 1 : 0;
    EXPECT_EQ(rows_packed, t.out);
    EXPECT_TRUE(torch::equal(from_folded, from_scales))
        << conv->implementation() << " " << t.c << " -> " << t.out << " " << t.k << "x" << t.k
        << " /" << t.groups;
  }
  EXPECT_GE(scaled, 4);
  EXPECT_GE(sliced, 1) << "no packing was made in slices";
  if (DNNL_VERSION_MAJOR < 3 && winograd_made >= 3) {
    EXPECT_GE(winograd_sliced, 2) << "no Winograd packing was made in chunks";
  }
}

// A scaled Winograd packing of oneDNN's holds a chunk's folded rows and transform beside the
// packing, not the whole weight folded and transformed: packed whole, a 512 -> 512 layer's
// folded copy (9 MiB) and the reorder's scratchpad (16 MiB) set resnet18's tuned peak.
TEST(BlockedLayout, AScaledWinogradPackingHoldsAChunkBesideIt) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator keeps freed memory in quarantine";
#endif
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
  onednn::ConvSpec s;
  s.n = 1;
  s.c = s.out_channels = 512;
  s.h = s.w = 7;
  s.kh = s.kw = 3;
  s.padding[0] = s.padding[1] = 1;
  s.winograd = true;
  std::shared_ptr<const onednn::Conv> conv;
  try {
    conv = onednn::conv(s);
  } catch (const std::exception&) {
    GTEST_SKIP() << "no Winograd of oneDNN's on this CPU";
  }
  const at::Tensor weight = torch::randn({512, 512, 3, 3});
  const at::Tensor scales = torch::rand({512}) + 0.5;
  const auto bytes = static_cast<int64_t>(conv->packed_weights_bytes());
  at::Tensor packed = torch::ones({bytes}, at::kByte);  // resident before the measured span
  if (!(std::ofstream("/proc/self/clear_refs") << "5")) GTEST_SKIP() << "cannot reset VmHWM";
  const int64_t before = testing::status_bytes("VmRSS:");
  const bool scaled = conv->pack_weights(weight.data_ptr<float>(), packed.data_ptr(),
                                         scales.data_ptr<float>(), [](int64_t, int64_t) {});
  const int64_t grown = testing::status_bytes("VmHWM:") - before;
  if (!scaled) GTEST_SKIP() << conv->implementation() << " packs a folded copy (oneDNN 3)";
  EXPECT_LT(grown, int64_t{8} << 20) << conv->implementation();
}

TEST(BlockedLayout, WinogradConvolutionsMatchStock) {
  BlockedLayoutGuard on(true);
  on.set([](KernelOptions& o) { o.winograd = WinogradChoice::kAlways; });
  check_blocks(torch::randn({1, 3, 64, 64}), 1);
  if (!blocked_layout_here()) GTEST_SKIP() << testing::onednn_off_here();
  const bool ran = kernel_report().find("memoplan:winograd_f2x3") != std::string::npos;
  check_blocks(torch::randn({2, 3, 57, 61}), 1);
#if !defined(__SANITIZE_THREAD__)
  check_blocks(torch::randn({2, 3, 48, 48}), 2);
#endif
  // oneDNN's Winograd (AVX-512 only), residual additions included, then all three measured.
  on.set([](KernelOptions& o) { o.winograd = WinogradChoice::kOneDnn; });
  check_blocks(torch::randn({1, 3, 36, 36}), 1);
#if !defined(__SANITIZE_THREAD__)
  check_blocks(torch::randn({2, 3, 44, 44}), 2);
#endif
  const bool onednn_ran = kernel_report().find("wino_2x3") != std::string::npos;
  on.set([](KernelOptions& o) { o.winograd = WinogradChoice::kMeasure; });
  check_blocks(torch::randn({1, 3, 40, 40}), 1);
  ASSERT_TRUE(ran) << "memoplan's Winograd did not run on a CPU with AVX2 + FMA:\n"
                   << kernel_report();
  EXPECT_NE(kernel_report().find("conv3x3 1x32x11x11 -> 32 threads 1: "), std::string::npos)
      << kernel_report();
  EXPECT_NE(kernel_report().find("oneDNN direct"), std::string::npos) << kernel_report();
  if (onednn_ran) {  // then measured too
    EXPECT_NE(kernel_report().find("oneDNN winograd "), std::string::npos) << kernel_report();
  }
}

// The rule that weighs a Winograd form's gain against the bytes it adds to the model's weights
// (winograd_conv.cc), on resnet18's figures (44.6 MiB of weights): a 512 -> 512 layer's form adds
// 7.3 MiB for 24% of its time, a 256 -> 256 one's 1.84 MiB for 49%.
TEST(BlockedLayout, AWinogradFormIsTakenWhereItsGainPaysForItsBytes) {
  constexpr double kMiB = 1 << 20;
  const blocked::WinogradPrice offset{static_cast<uint64_t>(44.6 * kMiB), 1.0};
  const blocked::WinogradPrice min{static_cast<uint64_t>(44.6 * kMiB), 4.0};
  EXPECT_TRUE(blocked::winograd_pays(0.24, 7.3 * kMiB, offset));
  EXPECT_FALSE(blocked::winograd_pays(0.24, 7.3 * kMiB, min));
  EXPECT_TRUE(blocked::winograd_pays(0.49, 1.84 * kMiB, min));
  EXPECT_FALSE(blocked::winograd_pays(0.08, 0.1 * kMiB, offset)) << "below the 10% minimum gain";
  EXPECT_TRUE(blocked::winograd_pays(0.12, 100 * kMiB, {})) << "no model: the minimum gain only";
  EXPECT_FALSE(blocked::winograd_pays(0.05, 0, {}));
  // A form no larger than the direct packing costs nothing beyond the minimum gain.
  EXPECT_TRUE(blocked::winograd_pays(0.11, 0, min));
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

}  // namespace
}  // namespace memoplan::torch_ext

// Memory "min"'s sliced ops (memory_min/sliced_ops.h): a convolution in bands of rows or slices of
// channels, and max pooling by slices, give aten's bytes for every shape (a shape whose parts
// would differ runs whole); a module planned with memory "min" goes below the offset bound of the
// same module planned without it, its replayed passes identical to an unplanned copy's.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/script.h>

#include <cstring>
#include <string>
#include <vector>

#include "memoplan/torch/memory_min.h"
#include "memoplan/torch/plan.h"
#include "sliced_ops.h"
#include "tuned/tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

using testing::same_bytes;
using testing::thread_counts;

torch::jit::Stack call(const char* name, torch::jit::Stack stack) {
  const auto op = torch::jit::findOperatorFor(c10::OperatorName(name, ""));
  EXPECT_NE(op, nullptr) << name;
  op->getOperation()(stack);
  return stack;
}

struct ConvCase {
  std::vector<int64_t> input;  // N, C, H, W
  int64_t out_channels, kernel, stride, padding, dilation, groups;
  bool bias;
};

// Bands (3x3, 7x7 on three channels, 1x1 strided, dilated), channel slices (weights larger than
// the activations), depthwise slices, odd sizes, two images; each at one and two threads.
TEST(SlicedOps, ConvolutionsGiveAtensBytes) {
  c10::InferenceMode guard;
  const std::vector<ConvCase> cases = {
      {{1, 3, 160, 160}, 32, 7, 2, 3, 1, 1, true},    {{1, 32, 75, 61}, 64, 3, 1, 1, 1, 1, false},
      {{2, 32, 40, 40}, 48, 3, 1, 1, 1, 1, true},     {{1, 128, 56, 56}, 256, 1, 2, 0, 1, 1, false},
      {{1, 64, 41, 41}, 64, 3, 1, 2, 2, 1, false},    {{1, 512, 14, 14}, 512, 3, 2, 1, 1, 1, true},
      {{1, 96, 112, 112}, 96, 3, 2, 1, 1, 96, false}, {{2, 64, 57, 57}, 64, 5, 1, 2, 1, 64, true},
      {{1, 256, 28, 28}, 128, 1, 1, 0, 1, 1, false},
  };
  const SlicedCounts before = sliced_counts();
  for (const int threads : thread_counts()) {
    at::set_num_threads(threads);
    for (const ConvCase& c : cases) {
      torch::manual_seed(7);
      const at::Tensor x = torch::randn(c.input);
      const at::Tensor w =
          torch::randn({c.out_channels, c.input[1] / c.groups, c.kernel, c.kernel}) * 0.1;
      const c10::IValue b = c.bias ? c10::IValue(torch::randn({c.out_channels})) : c10::IValue();
      const std::vector<int64_t> stride = {c.stride, c.stride}, padding = {c.padding, c.padding},
                                 dilation = {c.dilation, c.dilation};
      const at::Tensor expected =
          at::conv2d(x, w, c.bias ? c10::optional<at::Tensor>(b.toTensor()) : c10::nullopt, stride,
                     padding, dilation, c.groups);
      torch::jit::Stack out =
          call("memoplan::conv2d_sliced", {x, w, b, stride, padding, dilation, c.groups});
      EXPECT_TRUE(same_bytes(out.back().toTensor(), expected))
          << c10::str(c.input) << " -> " << c.out_channels << " k" << c.kernel << " s" << c.stride
          << " g" << c.groups << ", " << threads << " threads";
    }
  }
  at::set_num_threads(1);
  // Every case runs in parts but two, whole for a reason counted: the dilated 3x3, whose parts
  // measured to save under 256 KiB of aten's temporaries, and the 1x1 stride-1 convolution at one
  // thread (OpenBLAS's in aten, whose results change with the matrix split: its check fails, or
  // its parts save little).
  const SlicedCounts after = sliced_counts();
  const uint64_t sliced = after.convolutions - before.convolutions;
  const uint64_t whole = after.whole_after_check - before.whole_after_check +
                         after.whole_saving_little - before.whole_saving_little;
  EXPECT_GE(sliced, (cases.size() - 2) * thread_counts().size());
  EXPECT_EQ(sliced + whole, cases.size() * thread_counts().size());
}

TEST(SlicedOps, MaxPoolingGivesAtensBytes) {
  c10::InferenceMode guard;
  const SlicedCounts before = sliced_counts();
  struct PoolCase {
    std::vector<int64_t> input;
    int64_t kernel, stride, padding;
    bool ceil_mode;
  };
  const std::vector<PoolCase> cases = {{{1, 64, 112, 112}, 3, 2, 1, false},
                                       {{2, 24, 75, 75}, 3, 2, 0, true},
                                       {{1, 48, 64, 64}, 2, 2, 0, false},
                                       {{1, 5, 200, 150}, 3, 1, 1, false}};
  for (const PoolCase& c : cases) {
    const at::Tensor x = torch::randn(c.input);
    x.view(-1)[7] = std::numeric_limits<float>::quiet_NaN();  // NaN wins its windows in both
    const std::vector<int64_t> kernel = {c.kernel, c.kernel}, stride = {c.stride, c.stride},
                               padding = {c.padding, c.padding}, dilation = {1, 1};
    const at::Tensor expected = at::max_pool2d(x, kernel, stride, padding, dilation, c.ceil_mode);
    torch::jit::Stack out =
        call("memoplan::max_pool2d_sliced", {x, kernel, stride, padding, dilation, c.ceil_mode});
    EXPECT_TRUE(same_bytes(out.back().toTensor(), expected)) << c10::str(c.input);
  }
  EXPECT_EQ(sliced_counts().poolings - before.poolings, cases.size());
}

// A stem (7x7 convolution, batch norm, ReLU, max pooling), a 3x3 convolution, a depthwise one,
// a convolution with weights larger than its activations and a 1x1 one.
torch::jit::Module stem() {
  torch::manual_seed(3);
  torch::jit::Module m("Stem");
  m.register_parameter("w0", torch::randn({32, 3, 7, 7}) * 0.1, false);
  m.register_parameter("g", torch::rand({32}) + 0.5, false);
  m.register_parameter("b", torch::randn({32}), false);
  m.register_parameter("mean", torch::randn({32}), false);
  m.register_parameter("var", torch::rand({32}) + 0.5, false);
  m.register_parameter("w1", torch::randn({64, 32, 3, 3}) * 0.1, false);
  m.register_parameter("w2", torch::randn({64, 1, 3, 3}) * 0.1, false);
  m.register_parameter("w3", torch::randn({512, 64, 3, 3}) * 0.05, false);
  m.register_parameter("w4", torch::randn({128, 512, 1, 1}) * 0.05, false);
  m.define(R"(
    def forward(self, x):
        y = torch.conv2d(x, self.w0, None, [2, 2], [3, 3])
        y = torch.relu(torch.batch_norm(y, self.g, self.b, self.mean, self.var, False, 0.1, 1e-5,
                                        False))
        y = torch.max_pool2d(y, [3, 3], [2, 2], [1, 1])
        y = torch.relu(torch.conv2d(y, self.w1, None, [1, 1], [1, 1]))
        y = torch.conv2d(y, self.w2, None, [2, 2], [1, 1], [1, 1], 64)
        y = torch.relu(torch.conv2d(y, self.w3, None, [1, 1], [1, 1]))
        y = torch.conv2d(y, self.w4)
        return torch.adaptive_avg_pool2d(y, [1, 1])
  )");
  m.eval();
  return m;
}

TEST(SlicedOps, MemoryMinGoesBelowTheOffsetBoundWithAtensBytes) {
  c10::InferenceMode guard;
  int below_bound = 0;
  for (const int threads : thread_counts()) {
    at::set_num_threads(threads);
    for (const int64_t batch : {1, 2}) {
      torch::jit::Module reference = stem(), offset = stem(), planned = stem();
      const at::Tensor x = torch::randn({batch, 3, 192, 192});
      const PlanSummary whole = plan(offset, {x});
      PlanOptions options;
      options.memory = Memory::kMin;
      const SlicedCounts before = sliced_counts();
      const PlanSummary summary = plan(planned, {x}, options);
      const at::Tensor expected = reference.forward({x}).toTensor();
      const PlanStats stats_before = plan_stats();
      for (int pass = 0; pass < 4; ++pass) {
        EXPECT_TRUE(same_bytes(planned.forward({x}).toTensor(), expected))
            << "pass " << pass << ", batch " << batch << ", " << threads << " threads";
      }
      const PlanStats d = plan_stats() - stats_before;
      EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
      EXPECT_EQ(d.planned_hits, 4 * summary.planned_tensors) << to_string(d);
      EXPECT_GT(sliced_counts().convolutions, before.convolutions);
      EXPECT_GT(sliced_counts().poolings, before.poolings);
      // The stem convolution's blocked output and its copy, the weights laid out anew: aten's
      // temporaries set the peak without the parts. Where a shape's parts did not give aten's
      // bytes (the check keeps the whole call: seen on an AVX-512 Xeon at two threads, where
      // oneDNN's kernel for a part sums in another order), that shape's temporaries may set the
      // peak again; never above the plain plan's bound.
      const uint64_t kept_whole = sliced_counts().whole_after_check - before.whole_after_check;
      const std::string where = "batch " + std::to_string(batch) + ", " + std::to_string(threads) +
                                " threads, " + std::to_string(kept_whole) + " shapes kept whole";
      if (kept_whole == 0) {
        EXPECT_LT(summary.slab_bytes, whole.offset_lower_bound_bytes * 8 / 10)
            << summary.slab_bytes << " vs " << whole.offset_lower_bound_bytes << ", " << where;
      }
      EXPECT_LE(summary.slab_bytes, whole.offset_lower_bound_bytes) << where;
      below_bound += summary.slab_bytes < whole.offset_lower_bound_bytes * 8 / 10;
    }
  }
  EXPECT_GT(below_bound, 0) << "no thread count and batch went below the offset bound";
  at::set_num_threads(1);
}

}  // namespace
}  // namespace memoplan::torch_ext

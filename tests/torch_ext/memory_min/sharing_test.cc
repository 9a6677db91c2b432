// PlanOptions::memory "min" (sharing.h, sharing_pass.cc): outputs bit-identical to the unplanned
// module; an elementwise op's output takes its dying input's bytes and a concat's inputs lie in
// its output (batch 1), so the slab goes below the offset lower bound; every replayed pass
// serves every planned tensor from the slab; and the cases that must not share do not: an input
// the caller holds, a tensor a view keeps alive, a concat written in place afterwards.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/script.h>

#include "memoplan/torch/plan.h"
#include "torch_test_support.h"

namespace memoplan::torch_ext {
namespace {

// Conv, batch norm, activations, a residual add and an inception-like concat of three branches
// (each made only for it), then a batch norm over the concat and a dense-block-like second
// concat that holds the first's inputs again.
torch::jit::Module branches() {
  torch::manual_seed(0);
  torch::jit::Module m("Branches");
  // Pointwise convolutions: no im2col buffer, so the activations, not a convolution's temporary,
  // set the peak.
  m.register_parameter("w0", torch::randn({8, 3, 1, 1}), false);
  m.register_parameter("w1", torch::randn({8, 8, 1, 1}), false);
  m.register_parameter("w2", torch::randn({8, 8, 1, 1}), false);
  m.register_parameter("w3", torch::randn({8, 8, 1, 1}), false);
  for (const char* name : {"g", "b", "mean"}) m.register_parameter(name, torch::randn({8}), false);
  m.register_parameter("var", torch::rand({8}) + 0.5, false);
  m.register_parameter("g24", torch::randn({24}), false);
  m.register_parameter("b24", torch::randn({24}), false);
  m.register_parameter("mean24", torch::randn({24}), false);
  m.register_parameter("var24", torch::rand({24}) + 0.5, false);
  m.define(R"(
    def forward(self, x):
        y = torch.conv2d(x, self.w0)
        y = torch.batch_norm(y, self.g, self.b, self.mean, self.var, False, 0.1, 1e-5, False)
        y = torch.relu(y)
        r = torch.sigmoid(torch.conv2d(y, self.w1))
        y = y + r
        a = torch.relu(torch.conv2d(y, self.w1))
        b = torch.hardswish(torch.conv2d(y, self.w2))
        c = torch.gelu(torch.conv2d(y, self.w3))
        d = torch.cat([a, b, c], 1)
        e = torch.batch_norm(d, self.g24, self.b24, self.mean24, self.var24, False, 0.1, 1e-5,
                             False)
        f = torch.cat([a, b, c, torch.relu(e)], 1)
        return torch.adaptive_avg_pool2d(f, [1, 1]) * 2.0
  )");
  m.eval();
  return m;
}

using testing::run;

PlanOptions memory_min() {
  PlanOptions options;
  options.memory = Memory::kMin;
  return options;
}

void expect_replayed_identically(torch::jit::Module& planned, torch::jit::Module& reference,
                                 const at::Tensor& x, const PlanSummary& summary) {
  const at::Tensor expected = run(reference, x);
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 6; ++pass) {
    EXPECT_TRUE(torch::equal(run(planned, x), expected)) << "pass " << pass;
  }
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.planned_passes, 6u);
  EXPECT_EQ(d.planned_hits, 6 * summary.planned_tensors) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

// branches() planned with memory "min" for a batch, beside an unplanned copy.
struct Planned {
  torch::jit::Module reference = branches();
  torch::jit::Module planned = branches();
  at::Tensor x;
  PlanSummary summary;
  explicit Planned(int64_t batch) : x(torch::randn({batch, 3, 24, 24})) {
    summary = plan(planned, {x}, memory_min());
  }
};

TEST(MemoryMin, SharesBytesBelowTheOffsetBoundWithIdenticalOutputs) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  Planned p(1);
  const PlanSummary& summary = p.summary;
  // batch norm, relu, add, three activations, the first concat's inputs, the second's...: the
  // concats' region holds half of what the pass held without sharing.
  EXPECT_GE(summary.shared_tensors, 6u);
  EXPECT_LE(summary.slab_bytes, summary.offset_lower_bound_bytes * 6 / 10);
  EXPECT_LT(summary.lower_bound_bytes, summary.offset_lower_bound_bytes);
  EXPECT_LT(summary.slab_bytes, summary.offset_lower_bound_bytes);
  EXPECT_GE(summary.slab_bytes, summary.lower_bound_bytes);
  expect_replayed_identically(p.planned, p.reference, p.x, summary);

  // Without it, the same module plans at the offset bound, sharing nothing.
  torch::jit::Module offset = branches();
  const PlanSummary plain = plan(offset, {p.x});
  EXPECT_EQ(plain.shared_tensors, 0u);
  EXPECT_EQ(plain.lower_bound_bytes, plain.offset_lower_bound_bytes);
  EXPECT_EQ(plain.offset_lower_bound_bytes, summary.offset_lower_bound_bytes);
  EXPECT_LT(summary.slab_bytes, plain.slab_bytes);
}

// A scripted nn.BatchNorm2d after a concat split in two, as in torchvision's ShuffleNetV2: its
// training branch counts batches in place and batch_norm, given `self.training`, may update the
// running statistics. The alias analysis counts both against the chunks' list (a list's elements
// may alias anything); both write module state only, never the concat's inputs, which lie in its
// output as in a trace (scripted shufflenet_v2_x1_0 planned 747,520 B against the trace's 688,128).
TEST(MemoryMin, ConcatsShareBeforeABatchNormThatMayTrain) {
  auto make = [] {
    torch::manual_seed(0);
    torch::jit::Module m("ScriptedBatchNorm");
    m.register_parameter("w1", torch::randn({8, 3, 1, 1}), false);
    m.register_parameter("w2", torch::randn({8, 3, 1, 1}), false);
    m.register_parameter("g", torch::randn({8}), false);
    m.register_parameter("b", torch::randn({8}), false);
    m.register_buffer("mean", torch::randn({8}));
    m.register_buffer("var", torch::rand({8}) + 0.5);
    m.register_buffer("tracked", torch::zeros({}, torch::kLong));
    m.register_attribute("training", c10::BoolType::get(), true);  // as nn.Module's
    m.define(R"(
      def forward(self, x):
          a = torch.relu(torch.conv2d(x, self.w1))
          b = torch.sigmoid(torch.conv2d(x, self.w2))
          c = torch.cat([a, b], 1)
          p, q = c.chunk(2, 1)
          if self.training:
              self.tracked.add_(1)
          d = torch.batch_norm(q, self.g, self.b, self.mean, self.var, self.training, 0.1, 1e-5,
                               False)
          return torch.adaptive_avg_pool2d(torch.relu(d), [1, 1]) + torch.adaptive_avg_pool2d(p, [1, 1])
    )");
    m.eval();
    return m;
  };
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = make(), planned = make();
  const at::Tensor x = torch::randn({1, 3, 32, 32});
  const PlanSummary summary = plan(planned, {x}, memory_min());
  EXPECT_GE(summary.shared_tensors, 2u);  // the concat's inputs
  EXPECT_LT(summary.lower_bound_bytes, summary.offset_lower_bound_bytes);
  expect_replayed_identically(planned, reference, x, summary);
}

// Batch 2: a concat's inputs are no longer stretches of its output (they interleave per image),
// so only the elementwise ops may share, and here the concats set the peak: the plan is the one
// without sharing (memory "min" is never worse than "offset"); outputs stay identical.
TEST(MemoryMin, ConcatsAboveBatchOneCopyAsBefore) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  Planned p(2);
  EXPECT_LE(p.summary.slab_bytes, p.summary.offset_lower_bound_bytes);
  EXPECT_LE(p.summary.lower_bound_bytes, p.summary.offset_lower_bound_bytes);
  expect_replayed_identically(p.planned, p.reference, p.x, p.summary);
}

// What must not share: the caller's input (relu(x)), a tensor a view keeps alive past its op
// (v = y[0]), a concat whose output is written in place while its inputs live (relu_), and an
// input read in another layout by the same op (y + y.t()).
torch::jit::Module must_not_share() {
  torch::manual_seed(1);
  torch::jit::Module m("MustNotShare");
  m.register_parameter("w", torch::randn({4, 4, 1, 1}), false);
  m.define(R"(
    def forward(self, x):
        h = torch.relu(x)
        y = torch.conv2d(h, self.w)
        v = y[0]
        z = torch.sigmoid(y)
        a = torch.conv2d(z, self.w)
        b = torch.conv2d(a, self.w)
        c = torch.cat([a, b], 1)
        c.relu_()
        s = torch.conv2d(z, self.w)[0, 0]
        t = s + s.t()
        return torch.stack([c.sum(), a.sum(), v.sum(), t.sum(), x.sum()])
  )");
  m.eval();
  return m;
}

TEST(MemoryMin, NeverSharesWhatIsStillReadOrHeld) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = must_not_share();
  torch::jit::Module planned = must_not_share();
  const at::Tensor x = torch::randn({1, 4, 8, 8});
  const at::Tensor x_before = x.clone();
  const PlanSummary summary = plan(planned, {x}, memory_min());
  // z = sigmoid(y) cannot take y's bytes (v keeps them), c's inputs stay apart (c is written),
  // t cannot take s's bytes (s.t() reads them transposed): nothing shares.
  EXPECT_EQ(summary.shared_tensors, 0u);
  expect_replayed_identically(planned, reference, x, summary);
  EXPECT_TRUE(torch::equal(x, x_before));  // the caller's input is never written
}

// memoplan::cat, which replaces an eligible aten::cat under memory "min", makes what aten::cat
// makes: values, shape, strides and dtype, on the path that skips copies (batch 1, contiguous)
// and on every path that hands over to aten::cat.
TEST(MemoryMin, InPlaceConcatMatchesAtenCat) {
  c10::InferenceMode guard;
  const std::shared_ptr<torch::jit::Operator> op =
      torch::jit::findOperatorFor(c10::OperatorName("memoplan::cat", ""));
  ASSERT_TRUE(op);
  torch::jit::Operation cat = op->getOperation();
  auto check = [&](std::vector<at::Tensor> inputs, int64_t dim, const char* what) {
    const at::Tensor expected = at::cat(inputs, dim);
    torch::jit::Stack stack = {c10::List<at::Tensor>(inputs), dim};
    cat(stack);
    ASSERT_EQ(stack.size(), 1u);
    const at::Tensor got = stack[0].toTensor();
    EXPECT_TRUE(torch::equal(got, expected)) << what;
    EXPECT_EQ(got.strides(), expected.strides()) << what;
    EXPECT_EQ(got.dtype(), expected.dtype()) << what;
  };
  check({torch::randn({1, 3, 4, 4}), torch::randn({1, 5, 4, 4})}, 1, "batch 1, channels");
  check({torch::randn({1, 3, 4, 4}), torch::randn({1, 5, 4, 4})}, -3, "negative dim");
  check({torch::randn({2, 3, 4}), torch::randn({2, 1, 4})}, 1, "batch 2: aten's");
  check({torch::randn({2, 3}), torch::randn({4, 3})}, 0, "first dim");
  check({torch::randn({1, 3, 4, 4}).contiguous(at::MemoryFormat::ChannelsLast),
         torch::randn({1, 2, 4, 4}).contiguous(at::MemoryFormat::ChannelsLast)},
        1, "channels last: aten's");
  check({torch::randn({1, 3, 1, 1}), torch::randn({1, 2, 1, 1})}, 1, "1x1 spatial");
  check({torch::randn({1, 4}), torch::randn({1, 6}).slice(1, 1, 5)}, 1, "a view");
  check({torch::randn({1, 2}), torch::randn({1, 0})}, 1, "an empty input");
  check({torch::randn({1, 2}), torch::ones({1, 2}, at::kDouble)}, 1, "dtypes promoted: aten's");
  EXPECT_THROW(check({torch::randn({1, 2, 3}), torch::randn({1, 2, 4})}, 1, "mismatch"),
               c10::Error);
}

}  // namespace
}  // namespace memoplan::torch_ext

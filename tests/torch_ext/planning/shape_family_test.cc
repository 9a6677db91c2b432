// Shape families on passes LibTorch really makes (issue 18): an attention block profiled at three
// sequence lengths and a convolution stack at three batch sizes (of 2 or more: batch 1 takes
// another path) fit one family each, and the
// family predicts the profiled trace of unseen shapes exactly (every size, same structure).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/softmax.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "memoplan/planner/family.h"
#include "memoplan/planner/planner.h"
#include "memoplan/torch/profiler.h"

namespace memoplan::torch_ext {
namespace {

// Debian's OpenBLAS runs large GEMMs on a thread pool of its own, which at::set_num_threads does
// not reach and ThreadSanitizer cannot see into (it takes the pool's writes for races). The
// attention tests here (and family_plan_test.cc's, same binary) multiply matrices large enough
// for it: one BLAS thread for the whole test binary.
const bool one_blas_thread = [] {
  using SetThreads = void (*)(int);
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set) set(1);
  return set != nullptr;
}();

// One pass of `run`, profiled on the calling thread, after one unprofiled pass (first-call
// allocations are not the pass's).
Trace profile(const std::function<at::Tensor()>& run) {
  run();
  ProfileSession session;
  session.begin();
  { at::Tensor out = run(); }
  return session.end();
}

struct Attention {
  int64_t d = 256, heads = 4;
  at::Tensor w_qkv = at::randn({768, 256}), b_qkv = at::randn({768}), w_o = at::randn({256, 256}),
             b_o = at::randn({256});
  at::Tensor operator()(const at::Tensor& x) const {
    const int64_t l = x.size(1), hd = d / heads;
    at::Tensor qkv = at::linear(x, w_qkv, b_qkv);
    auto split = [&](int64_t i) {
      return qkv.slice(2, i * d, (i + 1) * d).reshape({l, heads, hd}).transpose(0, 1).contiguous();
    };
    at::Tensor q = split(0), k = split(1), v = split(2);
    at::Tensor p = at::softmax(at::bmm(q, k.transpose(1, 2)), -1);
    at::Tensor context = at::bmm(p, v).transpose(0, 1).contiguous().reshape({1, l, d});
    return at::layer_norm(at::linear(context, w_o, b_o).add(x), {d});
  }
};

struct ConvStack {
  at::Tensor w1 = at::randn({16, 3, 3, 3}), w2 = at::randn({32, 16, 3, 3}),
             w3 = at::randn({10, 32});
  at::Tensor operator()(const at::Tensor& x) const {
    at::Tensor h = at::relu(at::conv2d(x, w1, {}, 1, 1));
    h = at::relu(at::conv2d(h, w2, {}, 2, 1));
    return at::linear(at::adaptive_avg_pool2d(h, {1, 1}).flatten(1), w3);
  }
};

std::vector<uint64_t> sizes(const Trace& t) {
  std::vector<uint64_t> s;
  for (const Allocation& a : t.allocations) s.push_back(a.size);
  return s;
}

void expect_same_structure(const Trace& predicted, const Trace& profiled) {
  ASSERT_EQ(predicted.allocations.size(), profiled.allocations.size());
  for (size_t i = 0; i < predicted.allocations.size(); ++i) {
    EXPECT_EQ(predicted.allocations[i].begin, profiled.allocations[i].begin) << i;
    EXPECT_EQ(predicted.allocations[i].end, profiled.allocations[i].end) << i;
  }
  EXPECT_EQ(sizes(predicted), sizes(profiled));
}

TEST(ShapeFamilyTorch, AttentionAtThreeLengthsPredictsEveryOtherLength) {
  at::set_num_threads(1);
  const Attention attention;
  auto pass = [&](int64_t l) {
    const at::Tensor x = at::randn({1, l, 256});
    return profile([&] { return attention(x); });
  };
  std::vector<Trace> traces;
  for (int64_t l : {16, 40, 64}) traces.push_back(pass(l));
  ASSERT_GT(traces[0].allocations.size(), 8u);
  Result<family::Model> model = family::fit_family(
      {{{1, 16, 256}, &traces[0]}, {{1, 40, 256}, &traces[1]}, {{1, 64, 256}, &traces[2]}});
  ASSERT_TRUE(model.ok()) << model.error();
  const family::FitSummary summary = family::summarize(*model);
  EXPECT_GE(summary.by_degree[2], 2u);  // the scores and their softmax grow with L²
  EXPECT_GE(summary.by_degree[1], 4u);
  for (int64_t l : {8, 23, 100, 200}) {
    Result<Trace> predicted = family::instantiate(*model, {1, l, 256});
    ASSERT_TRUE(predicted.ok()) << predicted.error();
    expect_same_structure(*predicted, pass(l));
    EXPECT_TRUE(plan_trace(*predicted).ok());
  }
}

TEST(ShapeFamilyTorch, ConvolutionsAtThreeBatchesPredictEveryOtherBatch) {
  at::set_num_threads(1);
  const ConvStack stack;
  auto pass = [&](int64_t b) {
    const at::Tensor x = at::randn({b, 3, 32, 32});
    return profile([&] { return stack(x); });
  };
  std::vector<Trace> traces;
  for (int64_t b : {1, 2, 3, 4}) traces.push_back(pass(b));
  auto sample = [&](int64_t b) {
    return family::Sample{{b, 3, 32, 32}, &traces[static_cast<size_t>(b - 1)]};
  };
  // Batch 1 takes another convolution path than larger batches (fewer allocations): not one
  // family with them, which fitting says instead of predicting wrong sizes.
  Result<family::Model> with_one = family::fit_family({sample(1), sample(2), sample(3)});
  ASSERT_FALSE(with_one.ok());
  EXPECT_NE(with_one.error().find("not one family"), std::string::npos) << with_one.error();
  Result<family::Model> model = family::fit_family({sample(2), sample(3), sample(4)});
  ASSERT_TRUE(model.ok()) << model.error();
  for (int64_t b : {5, 8}) {
    Result<Trace> predicted = family::instantiate(*model, {b, 3, 32, 32});
    ASSERT_TRUE(predicted.ok()) << predicted.error();
    expect_same_structure(*predicted, pass(b));
  }
}

}  // namespace
}  // namespace memoplan::torch_ext

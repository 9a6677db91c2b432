// Profiling real ATen ops: views share their base's allocation, allocations know the op they were
// made in (max_pool2d delegates to max_pool2d_with_indices), escaping outputs are marked, and the
// trace plans and validates.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/jit.h>

#include <cstdio>
#include <string>
#include <vector>

#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "memoplan/torch/graph_node.h"
#include "memoplan/torch/profiler.h"

namespace memoplan::torch_ext {
namespace {

TEST(ProfileOps, ViewsShareTheirBaseAllocation) {
  ProfileSession session;
  session.begin();
  at::Tensor base = at::empty({64, 64});
  at::Tensor flat = base.view({4096});
  at::Tensor rows = base.slice(0, 8, 16);
  at::Tensor transposed = base.t();
  at::Tensor diagonal = base.diagonal();
  rows.fill_(1.0);  // in place: no allocation either
  const auto row = session.allocation_of(base.data_ptr());
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(session.allocation_of(flat.data_ptr()), row);
  EXPECT_EQ(session.allocation_of(rows.data_ptr()), row);  // an interior pointer
  EXPECT_EQ(session.allocation_of(transposed.data_ptr()), row);
  EXPECT_EQ(session.allocation_of(diagonal[63].data_ptr()), row);
  const Trace trace = session.end();
  EXPECT_EQ(trace.allocations.size(), 1u);
  EXPECT_EQ(trace.allocations[0].size, 64u * 64u * sizeof(float));
  EXPECT_EQ(trace.allocations[0].provenance.op, "aten::empty");
  EXPECT_TRUE(trace.allocations[0].escapes);  // `base` is still alive
}

// conv2d -> relu -> max_pool2d; only the pooled output outlives the pass.
struct SmallNet {
  at::Tensor input = at::randn({1, 3, 16, 16});
  at::Tensor weight = at::randn({4, 3, 3, 3});

  at::Tensor run(const ProfileSession& session, uint64_t& conv_row, uint64_t& relu_row) const {
    at::Tensor conv, relu;
    {
      GraphNodeScope node(1);
      conv = at::conv2d(input, weight);
    }
    {
      GraphNodeScope node(2);
      relu = at::relu(conv);
    }
    conv_row = session.allocation_of(conv.data_ptr()).value_or(~0ull);
    relu_row = session.allocation_of(relu.data_ptr()).value_or(~0ull);
    GraphNodeScope node(3);
    return at::max_pool2d(relu, {2, 2});
  }
};

void print_trace(const Trace& trace) {
  for (const Allocation& a : trace.allocations) {
    std::printf("  row %2llu: %7llu bytes [%3llu, %3llu)%s node %2lld  %s <- %s\n",
                static_cast<unsigned long long>(a.id), static_cast<unsigned long long>(a.size),
                static_cast<unsigned long long>(a.begin), static_cast<unsigned long long>(a.end),
                a.escapes ? " escapes" : "        ", static_cast<long long>(a.provenance.node),
                a.provenance.op.c_str(), a.provenance.outer_op.c_str());
  }
}

TEST(ProfileOps, AllocationsKnowTheirOpsAndNodes) {
  at::set_num_threads(1);
  const SmallNet net;
  const bool callbacks_before = at::hasGlobalCallbacks();
  ProfileSession session;
  session.begin();
  uint64_t conv_row = 0, relu_row = 0;
  at::Tensor pooled = net.run(session, conv_row, relu_row);
  const auto pooled_row = session.allocation_of(pooled.data_ptr());
  const Trace trace = session.end();
  EXPECT_EQ(at::hasGlobalCallbacks(), callbacks_before);  // the shadow stack's callback is gone
  print_trace(trace);

  ASSERT_LT(conv_row, trace.allocations.size());
  ASSERT_LT(relu_row, trace.allocations.size());
  ASSERT_TRUE(pooled_row.has_value());
  const Allocation& conv = trace.allocations[conv_row];
  EXPECT_EQ(conv.provenance.outer_op, "aten::conv2d");
  EXPECT_EQ(conv.provenance.node, 1);
  EXPECT_FALSE(conv.escapes);
  const Allocation& relu = trace.allocations[relu_row];
  EXPECT_EQ(relu.provenance.outer_op, "aten::relu");
  EXPECT_EQ(relu.provenance.node, 2);
  EXPECT_FALSE(relu.escapes);

  // max_pool2d allocates nothing itself: max_pool2d_with_indices makes the output and the indices;
  // the indices die when max_pool2d returns, the output escapes.
  const Allocation& out = trace.allocations[*pooled_row];
  EXPECT_EQ(out.provenance.op, "aten::max_pool2d_with_indices");
  EXPECT_EQ(out.provenance.outer_op, "aten::max_pool2d");
  EXPECT_EQ(out.provenance.node, 3);
  EXPECT_TRUE(out.escapes);
  EXPECT_EQ(out.size, 4u * 7 * 7 * sizeof(float));
  int indices = 0;
  for (const Allocation& a : trace.allocations) {
    if (a.provenance.outer_op != "aten::max_pool2d" || a.id == out.id) continue;
    ++indices;
    EXPECT_EQ(a.provenance.op, "aten::max_pool2d_with_indices");
    EXPECT_EQ(a.size, 4u * 7 * 7 * sizeof(int64_t));
    EXPECT_FALSE(a.escapes);
    EXPECT_LE(a.end, out.end);
  }
  EXPECT_EQ(indices, 1);
  for (const Allocation& a : trace.allocations) {
    EXPECT_FALSE(a.provenance.outer_op.empty()) << "row " << a.id << " made outside every op";
    EXPECT_EQ(a.escapes, a.id == out.id) << "row " << a.id;
  }

  EXPECT_EQ(check_trace(trace), "");
  Result<Plan> plan = plan_trace(trace);
  ASSERT_TRUE(plan.ok()) << plan.error();
  const ValidationReport report = validate_plan(trace, *plan);
  EXPECT_TRUE(report.valid) << (report.messages.empty() ? "" : report.messages[0]);
  EXPECT_GT(plan->slab_bytes, 0u);
}

TEST(ProfileOps, RepeatedPassesGiveTheSameTrace) {
  at::set_num_threads(1);
  const SmallNet net;
  std::vector<std::string> passes;
  for (int pass = 0; pass < 3; ++pass) {
    ProfileSession session;
    session.begin();
    uint64_t conv_row = 0, relu_row = 0;
    at::Tensor pooled = net.run(session, conv_row, relu_row);
    std::string rows;
    for (const Allocation& a : session.end().allocations) {
      rows += std::to_string(a.size) + "@" + std::to_string(a.begin) + "-" + std::to_string(a.end) +
              ":" + a.provenance.op + "/" + a.provenance.outer_op + "/" +
              std::to_string(a.provenance.node) + "/" + std::to_string(a.provenance.callsite) + " ";
    }
    passes.push_back(rows);
  }
  // The first pass may differ (one-time caches); the steady state must not.
  EXPECT_EQ(passes[1], passes[2]);
}

// Under the TorchScript interpreter the outermost scope is the graph's op (the interpreter's
// "forward" scope is not an op scope), once the profiling executor has settled on its graph.
TEST(ProfileOps, TorchScriptGraphOpsAreOutermost) {
  at::set_num_threads(1);
  auto unit = torch::jit::compile(R"(
def forward(x, w):
    y = torch.relu(torch.conv2d(x, w))
    return torch.max_pool2d(y, [2, 2])
)");
  const SmallNet net;
  torch::jit::Function& forward = unit->get_function("forward");
  for (int warm = 0; warm < 3; ++warm) forward({net.input, net.weight});
  ProfileSession session;
  session.begin();
  at::Tensor pooled = forward({net.input, net.weight}).toTensor();
  const auto pooled_row = session.allocation_of(pooled.data_ptr());
  const Trace trace = session.end();
  print_trace(trace);
  ASSERT_TRUE(pooled_row.has_value());
  const Allocation& out = trace.allocations[*pooled_row];
  EXPECT_EQ(out.provenance.op, "aten::max_pool2d_with_indices");
  EXPECT_EQ(out.provenance.outer_op, "aten::max_pool2d");
  EXPECT_TRUE(out.escapes);
  for (const Allocation& a : trace.allocations) {
    const std::string& outer = a.provenance.outer_op;
    EXPECT_TRUE(outer == "aten::conv2d" || outer == "aten::relu" || outer == "aten::max_pool2d")
        << "row " << a.id << ": " << outer;
  }
  EXPECT_EQ(check_trace(trace), "");
  EXPECT_TRUE(plan_trace(trace).ok());
}

}  // namespace
}  // namespace memoplan::torch_ext

// How much of a planned pass runs on memoplan's kernels: one pass watched through RecordFunction,
// its convolution and matrix-product FLOPs split between memoplan's operators (its kernels, its
// oneDNN primitives, oneDNN on a weight it packed) and aten's, with the reason each aten op was
// left there. plan() measures it for the tuned kernels (memoplan/torch/plan.h, Coverage).
#pragma once

#include <cstdint>
#include <functional>

#include "memoplan/torch/plan.h"

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// Runs `pass` once on the calling thread with the observer on and returns what it saw. The ops
// counted are those the interpreter calls (the outermost RecordFunction scopes); what runs inside
// a memoplan operator tells where its FLOPs ran (an aten product inside it: on aten).
// `graph` (the planned forward's) is read for compute ops the observer cannot see
// (Coverage::unobserved_nodes).
Coverage measure_coverage(const std::function<void()>& pass, const torch::jit::Graph& graph);

// Keeps `coverage` as module `id`'s latest, for torch.ops.memoplan.coverage(module)
// (coverage_api.cc: {"flops", "tuned_flops", "tuned_flops_fraction", "left: OP (REASON)"}).
void remember_coverage(int64_t id, const Coverage& coverage);
void forget_coverage(int64_t id);

}  // namespace memoplan::torch_ext

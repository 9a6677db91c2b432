// The graph pass of plan(): inlines a module's forward, brings it to the canonical forms, runs
// the selected rewrites (kernels, budget, memory min) and puts the planning runtime's marks into
// it (pass_operators.h). The graph is rewritten in place, once per module type.
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdint>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {

// Rewrites the module's forward for `options` and registers it with the planning runtime; returns
// its id. A module whose type was rewritten before keeps that rewrite (other settings: an error).
int64_t rewrite_forward(torch::jit::Module& module, const PlanOptions& options);

// The module id of a graph already rewritten, else -1.
int64_t rewritten_id(const torch::jit::Graph& graph);

// Drops the function's cache of its preoptimized graph once its executors exist (graph_pass.cc).
void drop_optimized_graph_cache(torch::jit::GraphFunction& function);

}  // namespace memoplan::torch_ext

// One way to put a forward's body behind a check (settings_guard.h, flat_executor.h): the graph
// becomes
//
//   %ok = CONDITION[memoplan_module=id](self)
//   %out = prim::If(%ok)
//     block0: the body as it was                     -- or the call, with body_first false
//     block1: CALL[memoplan_module=id](self, x...)   -- one output per graph output
//
// Both operators are the caller's (registered with side effects, so no pass folds or drops them).
#pragma once

#include <ATen/core/symbol.h>

#include <cstdint>

namespace torch::jit {
struct Graph;
struct Node;
}  // namespace torch::jit

namespace memoplan::torch_ext {

// Splits `graph` as above; returns the If.
torch::jit::Node* branch_body(torch::jit::Graph& graph, c10::Symbol condition, c10::Symbol call,
                              int64_t id, bool body_first);
// The id a CONDITION or CALL node of branch_body carries.
int64_t branch_module(const torch::jit::Node* node);

}  // namespace memoplan::torch_ext

// memoplan's TorchScript operators as torch.profiler (and any RecordFunction observer) sees them:
// a user scope named for the operator, with its arguments when the observer asks for shapes.
// Operators registered with torch::jit::RegisterOperators bypass the dispatcher, which is what
// records aten's ops; without this a profile of a tuned model shows only aten's leftovers. A user
// scope, not a function scope: the planner's shadow stack (shadow_stack.cc) watches function
// scopes only, so allocation sites and plans are the same with or without it. With no observer of
// user scopes it costs RecordFunction's check for one (no allocation, the arguments untouched).
#pragma once

#include <ATen/core/stack.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <string>

namespace memoplan::torch_ext {

// torch::jit::Operator(schema, op, alias) whose calls are recorded as above; the scope's name and
// the count of arguments it shows come from the schema.
torch::jit::Operator recorded_operator(const std::string& schema, void (*op)(torch::jit::Stack&),
                                       c10::AliasAnalysisKind alias);

}  // namespace memoplan::torch_ext

// memoplan's TorchScript operators as torch.profiler (and any RecordFunction observer) sees them:
// a user scope named for the operator, with its arguments when the observer asks for shapes.
// Operators registered with torch::jit::RegisterOperators bypass the dispatcher, which is what
// records aten's ops; without this a profile of a tuned model shows only aten's leftovers. A user
// scope, not a function scope: the planner's shadow stack (shadow_stack.cc) watches function
// scopes only, so allocation sites and plans are the same with or without it. With no observer of
// user scopes it costs RecordFunction's check for one (no allocation, the arguments untouched).
#pragma once

#include <ATen/record_function.h>

#define MEMOPLAN_RECORD(name, stack, n) \
  RECORD_USER_SCOPE_WITH_INPUTS(        \
      name, c10::ArrayRef<const c10::IValue>(&(stack)[(stack).size() - (n)], (n)))

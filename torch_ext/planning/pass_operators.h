// The planning runtime's three graph operators (memoplan::AllocateSlab / AllocateTensor /
// EndPass, registered in pass_operators.cc) and the key of a pass's inputs. graph_pass.cc puts
// the operators into a module's forward; plan_api.cc keys plan()'s requests the way a pass does.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <string>

namespace memoplan::torch_ext {

inline const c10::Symbol kAllocateSlab = c10::Symbol::fromQualString("memoplan::AllocateSlab");
inline const c10::Symbol kAllocateTensor = c10::Symbol::fromQualString("memoplan::AllocateTensor");
inline const c10::Symbol kEndPass = c10::Symbol::fromQualString("memoplan::EndPass");
// The node's number is an attribute, not a constant input: one node per mark instead of three
// (two constants and the call) in every copy of the graph the executor keeps (bert_encoder: the
// constants' nodes and values were some 13 MiB of a planned process's peak).
inline const c10::Symbol kNodeAttribute = c10::Symbol::attr("memoplan_node");

// Everything the allocation sequence of a pass depends on that its inputs show (the thread count
// and grad mode, then every tensor's dtype, device, sizes, strides, every scalar's value), in a
// reused thread-local buffer: no allocation per pass once it has grown.
const std::string& pass_key(const c10::IValue* inputs, size_t count);

}  // namespace memoplan::torch_ext

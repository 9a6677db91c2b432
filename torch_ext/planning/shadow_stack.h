// The aten-scope shadow stack: while enabled, a RecordFunction callback pushes and pops the op
// scopes (RecordScope::FUNCTION: every dispatcher op, nested ones included) of each thread, so an
// allocation knows the innermost op it is made in and the outermost one (the graph-level op)
// without unwinding the native stack. Also holds each thread's current graph node (graph_node.h).
#pragma once

#include <cstddef>

#include "record_table.h"

namespace memoplan::torch_ext::shadow_stack {

// Reference-counted: the first enable() registers the callback (a global one: intra-op worker
// threads get stacks too), the last disable() removes it. Callers serialize these two.
void enable();
void disable();

// The calling thread's innermost and outermost op, path hash and graph node.
OpContext current();
size_t depth();  // the calling thread's number of open op scopes

}  // namespace memoplan::torch_ext::shadow_stack

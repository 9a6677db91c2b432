// The flat executor (issue 52): once a module is planned, its forward runs as a prepared list of
// steps instead of through TorchScript's interpreter. Each node's operation is resolved once,
// constants (and lists of constants that nothing writes) are made once, module attributes are
// read by slot, a value is moved into its last reader and dropped after it, as the interpreter
// does, so the planned bytes, the in-place writes over dying inputs and the outputs are the
// interpreter's. The interpreter's own work per node (its instruction loop, the stack copies of
// every constant, a fresh list per int[] argument, the attribute chains) goes; the operators are
// the same calls, so RecordFunction scopes, the planning runtime and every fallback are too.
//
// The rewritten forward becomes
//
//   %ready = memoplan::FlatReady[id]()
//   %out = prim::If(%ready)
//     block0: memoplan::RunFlat[id](self, inputs...)   -- the program built from block1
//     block1: the forward as rewritten                  -- the interpreter's, until built
//
// so warm-up, profiling and the coverage pass run as before and a Python or C++ caller of
// module.forward takes the program without a change. A body the program cannot take (a loop, an
// interpreter instruction with no operator: fork, SetAttr, ...) keeps the interpreter; build()
// says why.
//
// Off unless MEMOPLAN_EXECUTOR=flat when plan() rewrites the module: it saves little (15-30 ns
// of a trivial node's 1.5-3 us, about 1% of a small net's pass: a node's time is its operator's
// own work), and it runs the graph as rewritten, without the optimizations LibTorch's executor
// applies to its own copy (LibTorch 2.6 fuses frozen graphs' ops, to other bits).
#pragma once

#include <cstdint>
#include <string>

namespace torch::jit {
struct Block;
struct Graph;
}  // namespace torch::jit

namespace memoplan::torch_ext::flat {

// Whether MEMOPLAN_EXECUTOR=flat asks for the flat executor.
bool enabled();

// Wraps `graph`'s body (module `id`'s forward, rewritten and marked) as above.
void wrap(torch::jit::Graph& graph, int64_t id);

// The body wrap() moved into block1; the graph's own block where it did not wrap.
const torch::jit::Block* body(const torch::jit::Graph& graph);

// Builds module `id`'s program from `graph`'s body, where wrap() wrapped it; from then on its
// calls run it. Returns "flat" when built, else "interpreter: " and why not.
std::string build(int64_t id, const torch::jit::Graph& graph);

// Module `id`'s program goes; its calls take the interpreter again.
void forget(int64_t id);

}  // namespace memoplan::torch_ext::flat

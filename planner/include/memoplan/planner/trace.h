// The trace: every allocation of one inference pass. Pure data; reading and writing it lives in
// src/ (trace_io.h). Format documented in docs/FORMATS.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memoplan {

// Where an allocation came from. Every field is optional (empty / 0 / -1 when unknown).
struct Provenance {
  std::string op;         // innermost op or scope that made it, e.g. "aten::empty"
  std::string outer_op;   // outermost op around it (the graph-level op), e.g. "aten::conv2d"
  int64_t node = -1;      // graph node running when it was made (torch extension); -1 unknown
  uint64_t callsite = 0;  // hash of the allocating call stack
  uint32_t thread = 0;    // small per-pass thread index
};

// No allocation: the value of Allocation::alias_of and ::slice_of when the row claims no relation.
inline constexpr uint64_t kNoRow = ~uint64_t{0};

// One allocation. Lifetimes are half-open on the pass's global event clock: the block is live at
// every time t with begin <= t < end. An allocation made and freed at the same tick (begin == end)
// is treated as live during [begin, begin + 1): it existed, so it needs space for that instant.
struct Allocation {
  uint64_t id = 0;       // unique within the trace; ids need not be dense
  uint64_t size = 0;     // bytes requested; 0 takes no space and is never placed
  uint64_t align = 0;    // required alignment in bytes (power of two); 0 = Trace::default_align
  uint64_t begin = 0;    // first tick live (inclusive)
  uint64_t end = 0;      // first tick dead (exclusive)
  bool escapes = false;  // still alive when the pass ended (graph output, cache, leak)
  // What a recorder that knows the ops claims about sharing bytes (Occamy's tensor coalescing,
  // concat without copies; docs/PLANNER.md, "Aliasing"). Both are ids of other rows, kNoRow for
  // none. A planner may use them (--memory min) or not; the validator accepts two live blocks
  // overlapping in address only through one of them.
  // alias_of: the allocation dies at the op that creates this one, which reads it element by
  // element into this one: this one may take its bytes (same start; this one no larger).
  uint64_t alias_of = kNoRow;
  // slice_of: this allocation's contents are also bytes [slice_offset, slice_offset + size) of
  // that one's (a concat's input and its output) and neither is written while both live: this one
  // may lie at that place inside it.
  uint64_t slice_of = kNoRow;
  uint64_t slice_offset = 0;
  Provenance provenance;
};

struct TraceMeta {
  std::string name;               // short name, e.g. "resnet18"
  std::string model_fingerprint;  // hash of the model file or module, when known
  std::string input_shapes;       // e.g. "1x3x224x224"
  std::string source;             // who recorded it: "torch.profiler", "csv", ...
  uint64_t threads = 0;           // intra-op threads while recording, 0 = unknown
};

struct Trace {
  TraceMeta meta;
  uint64_t default_align = 64;  // alignment of rows whose align is 0
  std::vector<Allocation> allocations;
};

// The end tick used for planning: end, or begin + 1 for an instantaneous allocation.
inline uint64_t effective_end(const Allocation& a) { return a.end > a.begin ? a.end : a.begin + 1; }
inline uint64_t effective_align(const Trace& t, const Allocation& a) {
  return a.align ? a.align : t.default_align;
}

// A stable 64-bit hash (hex) of what planning depends on: sizes, alignments and lifetimes in row
// order. A plan records it so a plan is never applied to a different trace.
std::string trace_fingerprint(const Trace& trace);

// Structural checks a trace must pass before planning: end >= begin, alignments powers of two,
// unique ids; an alias_of or slice_of names another row, an alias is no larger than its row and
// begins after it, a slice lies inside its row, and slice_of has no cycle. Returns an empty string
// when fine, else the first problem found.
std::string check_trace(const Trace& trace);

}  // namespace memoplan

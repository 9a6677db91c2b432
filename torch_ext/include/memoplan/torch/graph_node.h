// The graph node a thread is running, as the graph pass numbers them. Allocations made while a
// node is current are attributed to it in profiled traces (Provenance::node). Per thread: intra-op
// worker threads see -1 unless they set it themselves. No torch headers.
#pragma once

#include <cstdint>

namespace memoplan::torch_ext {

constexpr int64_t kUnknownNode = -1;

void set_current_node(int64_t node);  // kUnknownNode clears it
int64_t current_node();

// Sets the calling thread's current node for a scope and restores the previous one after.
class GraphNodeScope {
 public:
  explicit GraphNodeScope(int64_t node) : previous_(current_node()) { set_current_node(node); }
  ~GraphNodeScope() { set_current_node(previous_); }
  GraphNodeScope(const GraphNodeScope&) = delete;
  GraphNodeScope& operator=(const GraphNodeScope&) = delete;

 private:
  int64_t previous_;
};

}  // namespace memoplan::torch_ext

// The graph pass of memory "min" (sharing_pass.cc): a memoplan::ShareInputs node before every
// op whose output may take bytes its inputs hold (sharing.h's two kinds). No torch headers.
#pragma once

#include <memory>

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// Puts the ShareInputs nodes into a forward graph that has its allocation marks (each goes right
// before its op, after the op's mark). Returns how many.
int insert_share_nodes(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace memoplan::torch_ext

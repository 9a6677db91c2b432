// A module's weights as storages: the CPU tensors among its attributes (every submodule's) and its
// forward graph's tensor constants (a frozen module's weights), each storage once, in the order
// first met. What weights held once map into their file and what module_memory counts.
#pragma once

#include <vector>

namespace c10 {
struct StorageImpl;
}
namespace torch::jit {
struct Graph;
struct Module;
}  // namespace torch::jit

namespace memoplan::torch_ext::budget {

// `graph` may be null (attributes only). Storages without data (empty tensors) and MKL-DNN
// tensors (opaque) are left out.
std::vector<c10::StorageImpl*> module_weights(const torch::jit::Module& module,
                                              const torch::jit::Graph* graph);

}  // namespace memoplan::torch_ext::budget

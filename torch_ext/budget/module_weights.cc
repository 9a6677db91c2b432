// A module's weights as storages (module_weights.h).
#include "module_weights.h"

#include <c10/core/StorageImpl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <unordered_set>

namespace memoplan::torch_ext::budget {
namespace {

struct Collector {
  std::vector<c10::StorageImpl*> storages;
  std::unordered_set<c10::StorageImpl*> seen;
  void add(const c10::IValue& value) {
    if (!value.isTensor()) return;
    const at::Tensor& t = value.toTensor();
    if (!t.defined() || !t.device().is_cpu() || !t.has_storage() || t.is_mkldnn()) return;
    c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (!storage->data() || storage->nbytes() == 0) return;
    if (seen.insert(storage).second) storages.push_back(storage);
  }
  void add_block(const torch::jit::Block* block) {
    for (const torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::prim::Constant && node->output()->type()->cast<c10::TensorType>()) {
        add(torch::jit::toIValue(node->output()).value());
      }
      for (const torch::jit::Block* sub : node->blocks()) add_block(sub);
    }
  }
};

}  // namespace

std::vector<c10::StorageImpl*> module_weights(const torch::jit::Module& module,
                                              const torch::jit::Graph* graph) {
  Collector found;
  for (const torch::jit::Module& m : module.modules()) {
    for (const torch::jit::NameValue& attribute : m.named_attributes(/*recurse=*/false)) {
      found.add(attribute.value);
    }
  }
  if (graph) found.add_block(graph->block());
  return std::move(found.storages);
}

}  // namespace memoplan::torch_ext::budget

// Weights held once on the tuned path (released_weights.h).
#include "released_weights.h"

#include <c10/core/StorageImpl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <unordered_set>
#include <vector>

#include "module_table.h"
#include "weight_file.h"
#include "planning/planning.h"

namespace memoplan::torch_ext::budget {
namespace {

ModuleTable<WeightFile>& files() {
  static auto* table = new ModuleTable<WeightFile>();
  return *table;
}

std::shared_ptr<WeightFile> file_of(int64_t id) { return files().find(id); }

// Tensors of a page or more that own plain CPU memory (not one already mapped).
struct Collector {
  std::vector<c10::StorageImpl*> storages;
  std::unordered_set<c10::StorageImpl*> seen;
  void add(const c10::IValue& value) {
    if (!value.isTensor()) return;
    const at::Tensor& t = value.toTensor();
    if (!t.defined() || !t.device().is_cpu() || !t.has_storage() || t.is_mkldnn()) return;
    c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (storage->nbytes() < page_bytes() || !storage->data()) return;
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

void map_for_release(torch::jit::Module& module, const torch::jit::Graph& graph, int64_t id,
                     const std::string& dir) {
  Collector found;
  for (const torch::jit::Module& m : module.modules()) {
    for (const torch::jit::NameValue& attribute : m.named_attributes(/*recurse=*/false)) {
      found.add(attribute.value);
    }
  }
  found.add_block(graph.block());
  if (found.storages.empty()) return;
  files().put(id, WeightFile::map({found.storages}, weights_dir(dir)));
}

void drop_released(int64_t id) {
  if (std::shared_ptr<WeightFile> file = file_of(id)) file->drop(0, file->bytes());
}

void give_back_plain_weights() {
  const std::vector<std::shared_ptr<WeightFile>> all = files().all();
  for (const auto& file : all) file->drop(0, file->bytes());
  // What a measurement freed (candidates' packings, outputs, a folded weight) would stay with the
  // allocator until plan() ends: given back now (resnet18's planning peak: 29 MiB).
  if (!all.empty()) release_free_memory();
}

ReleasedWeights released_weights(int64_t id) {
  ReleasedWeights r;
  if (std::shared_ptr<WeightFile> file = file_of(id)) {
    r.mapped_bytes = file->bytes();
    r.resident_bytes = file->resident_bytes();
  }
  return r;
}

}  // namespace memoplan::torch_ext::budget

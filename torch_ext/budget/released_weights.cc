// Weights held once on the tuned path (released_weights.h).
#include "released_weights.h"

#include <c10/core/StorageImpl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <vector>

#include "module_table.h"
#include "module_weights.h"
#include "planning/planning.h"
#include "weight_file.h"

namespace memoplan::torch_ext::budget {
namespace {

ModuleTable<WeightFile>& files() {
  static auto* table = new ModuleTable<WeightFile>();
  return *table;
}

std::shared_ptr<WeightFile> file_of(int64_t id) { return files().find(id); }

}  // namespace

void map_for_release(torch::jit::Module& module, const torch::jit::Graph& graph, int64_t id,
                     const std::string& dir) {
  std::vector<c10::StorageImpl*> storages;  // a page or more each
  for (c10::StorageImpl* storage : module_weights(module, &graph)) {
    if (storage->nbytes() >= page_bytes()) storages.push_back(storage);
  }
  if (storages.empty()) return;
  files().put(id, WeightFile::map({storages}, weights_dir(dir)));
  // The weights' heap copies are free now: back to the system before the first pass packs
  // anything (BERT: 410 MiB the allocator kept while its first packings were made).
  release_free_memory();
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

void give_back_plain_range(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  for (const auto& file : files().all()) {
    if (p >= file->base() && p < file->base() + file->bytes()) {
      file->drop(static_cast<uint64_t>(p - file->base()), bytes);
      return;
    }
  }
}

void forget_released(int64_t id) { files().erase(id); }

ReleasedWeights released_weights(int64_t id) {
  ReleasedWeights r;
  if (std::shared_ptr<WeightFile> file = file_of(id)) {
    r.mapped_bytes = file->bytes();
    r.resident_bytes = file->resident_bytes();
  }
  return r;
}

}  // namespace memoplan::torch_ext::budget

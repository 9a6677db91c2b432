#include "weight_groups.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace memoplan::torch_ext::budget {
namespace {

// The largest number of slices a linear's weight of `rows` output rows may be cut in: a power of
// two dividing the rows, each slice at least 64 rows, at most 64 slices.
uint32_t max_slices(int64_t rows) {
  uint32_t slices = 1;
  while (slices < 64 && rows % (2 * slices) == 0 && rows / (2 * slices) >= 64) slices *= 2;
  return slices;
}

// The most slices (a power of two up to `most`) whose products equal the whole weight's bit for
// bit on a random row, with and without a bias, as budget_linear computes them: BLAS kernels are
// picked by shape, and a slice's shape may get another rounding (measured on OpenBLAS: a
// 1024 x 1024 weight's 64-row slices differ in the last bits).
uint32_t identical_slices(const at::Tensor& weight, uint32_t most) {
  // A generator of its own: planning leaves the program's random stream as it was.
  at::Generator generator = at::detail::createCPUGenerator(0x6d656d6f);
  const at::Tensor row = at::randn({1, weight.size(1)}, generator);
  const at::Tensor bias = at::randn({weight.size(0)}, generator);
  const at::Tensor whole = at::mm(row, weight.t());
  const at::Tensor whole_bias = at::addmm(bias, row, weight.t());
  uint32_t fits = 1;
  for (uint32_t slices = 2; slices <= most; slices *= 2) {
    const int64_t per = weight.size(0) / slices;
    at::Tensor out = at::empty(whole.sizes(), whole.options());
    at::Tensor out_bias = at::empty(whole.sizes(), whole.options());
    for (uint32_t s = 0; s < slices; ++s) {
      const at::Tensor w = weight.narrow(0, s * per, per).t();
      at::Tensor o = out.narrow(1, s * per, per), ob = out_bias.narrow(1, s * per, per);
      at::mm_out(o, row, w);
      at::addmm_out(ob, bias.narrow(0, s * per, per), row, w);
    }
    if (!at::equal(out, whole) || !at::equal(out_bias, whole_bias)) break;
    fits = slices;
  }
  return fits;
}

}  // namespace

WeightGroups find_weight_groups(const torch::jit::Module& module, const BudgetGraph& graph) {
  // Storages, each in the window of every path that reads it; grouped by window.
  struct Found {
    c10::StorageImpl* storage;
    uint32_t first, last;
    bool linear;  // sliceable: a linear's or a convolution's weight, rows (output channels) first
    bool conv;
    int64_t rows;
    at::Tensor tensor;
    bool gathered;
  };
  std::vector<Found> storages;
  std::unordered_map<c10::StorageImpl*, size_t> index;
  for (const WeightUse& use : graph.weights) {
    c10::IValue value = module._ivalue();
    bool ok = true;
    for (const std::string& name : use.path) {
      if (!value.isObject() || !value.toObject()->type()->hasAttribute(name)) {
        ok = false;
        break;
      }
      value = value.toObject()->getAttr(name);
    }
    if (!ok || !value.isTensor()) continue;
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.has_storage()) continue;
    c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    if (storage->nbytes() == 0 || !storage->data()) continue;
    // A sliceable weight: the whole of its storage, rows (output channels) contiguous.
    const bool whole_storage = tensor.is_contiguous() && tensor.storage_offset() == 0 &&
                               static_cast<uint64_t>(tensor.nbytes()) == storage->nbytes() &&
                               tensor.scalar_type() == at::kFloat;
    const bool conv = use.conv_weight && tensor.dim() == 4 && whole_storage;
    const bool linear = conv || (use.linear_weight && tensor.dim() == 2 && whole_storage);
    auto [it, fresh] = index.emplace(storage, storages.size());
    if (fresh) {
      storages.push_back({storage, use.first_step, use.last_step, linear, conv,
                          linear ? tensor.size(0) : 0, linear ? tensor : at::Tensor(),
                          use.gathered});
    } else {
      Found& f = storages[it->second];
      f.first = std::min(f.first, use.first_step);
      f.last = std::max(f.last, use.last_step);
      f.linear = false;  // read through two paths
      f.conv = false;
      f.gathered = false;
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, std::vector<size_t>> windows;
  for (size_t i = 0; i < storages.size(); ++i) {
    windows[{storages[i].first, storages[i].last}].push_back(i);
  }
  WeightGroups result;
  for (auto& [window, members] : windows) {
    // The sliceable weight first (at the group's start), and only one per group.
    std::stable_sort(members.begin(), members.end(),
                     [&](size_t a, size_t b) { return storages[a].linear > storages[b].linear; });
    size_t linears = 0, gathered = 0;
    for (size_t i : members) {
      linears += storages[i].linear;
      gathered += storages[i].gathered;
    }
    std::vector<c10::StorageImpl*> group;
    for (size_t i : members) group.push_back(storages[i].storage);
    result.storages.push_back(group);
    planner::WeightGroup weight_group;
    weight_group.first_step = window.first;
    weight_group.last_step = window.second;
    const bool sliceable = linears == 1 && window.first == window.second;
    const bool conv = sliceable && storages[members[0]].conv;
    // A convolution's slices are checked at its first call (the input's shape is needed).
    weight_group.max_slices =
        sliceable && !conv
            ? identical_slices(storages[members[0]].tensor, max_slices(storages[members[0]].rows))
            : 1;
    result.sliceable_bytes.push_back(sliceable ? storages[members[0]].storage->nbytes() : 0);
    result.conv.push_back(conv);
    weight_group.on_demand = !sliceable && gathered == members.size();
    result.groups.push_back(weight_group);
  }
  return result;
}

}  // namespace memoplan::torch_ext::budget

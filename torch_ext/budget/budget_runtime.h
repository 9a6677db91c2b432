// The budget's runtime (memoplan/torch/budget.h): per budgeted module its weight file, the budget
// problem learned at plan time, the schedule in force, and a loader thread; BudgetStep nodes and
// budget_linear call in here on every pass. No torch headers here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/torch/budget.h"

namespace torch::jit {
struct Graph;
struct Module;
}  // namespace torch::jit

namespace memoplan::torch_ext::budget {

class BudgetState;

// At the rewrite of `module`'s forward (before the allocation marks): step nodes, budget_linear,
// the weights mapped from a file in `dir` (empty: $MEMOPLAN_WEIGHTS_DIR, else ~/.cache/memoplan/
// weights) and a schedule that streams every weight until arm() knows the activations. Throws
// std::runtime_error.
void prepare(torch::jit::Module& module, torch::jit::Graph& graph, int64_t id,
             uint64_t budget_bytes, const std::string& dir);
bool budgeted(int64_t id);
// Once a plan of the module is made: plans the budget with its slab (the largest so far).
// Throws BudgetTooSmall; the streaming schedule stays.
BudgetSummary arm(int64_t id, uint64_t slab_bytes);
BudgetSummary replan(int64_t id, uint64_t budget_bytes);
BudgetSummary summary(int64_t id);
void set_sampling(int64_t id, bool on);
uint64_t resident_peak(int64_t id, bool reset);
void drop_page_cache(int64_t id);
// The module will not run again: its budget state (loader thread, schedule) goes; its mapping
// once its weights' storages have died.
void forget(int64_t id);

// Called by the graph's nodes.
void step(int64_t id, int64_t step);
// budget_linear and budget_conv2d: how many slices the weight at `weight` is computed in now (1:
// whole), and per slice: load(i) asks the loader for slice i's bytes, done(i) drops slice i's
// pages.
struct Slicer {
  int slices = 1;
  BudgetState* state = nullptr;  // the module's: it outlives the module's passes
  size_t group = 0;
  bool conv = false;  // a convolution's weight in a sliceable group
  void load(int slice) const;
  void done(int slice) const;
  void refused() const;      // the input cannot be sliced: the layer runs whole
  uint64_t slice_bytes = 0;  // of the weight (the last slice: what is left)
  uint64_t weight_bytes = 0;
  // Convolutions: whether the first call's facts are in (and the most slices, 0: aten's
  // convolution), learning them, and the module's work arena for the parts' buffers.
  bool conv_known(uint32_t* max_slices) const;
  void learn_conv(uint32_t max_slices, std::vector<uint64_t> work) const;
  void* work_arena(uint64_t bytes) const;
};
Slicer slicer(int64_t id, const void* weight, uint64_t weight_bytes);

}  // namespace memoplan::torch_ext::budget

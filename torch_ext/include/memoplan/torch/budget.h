// Inference under a memory budget (FlexNN): with PlanOptions::budget_bytes, plan() moves the
// module's weights into a file-backed mapping (written once, beside other runs' in the weights
// directory) and plans which of them stay resident (pinned), when each of the others is loaded
// (a loader thread, ahead of the layer that reads it) and dropped (after its last reader), and
// which linear layers compute a slice of their weight at a time, so that the slab plus the
// resident weights stay under the budget at every step of a pass. docs/BUDGET.md. No torch
// headers here.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace torch::jit {
struct Module;
}

namespace memoplan::torch_ext {

struct BudgetSummary {
  uint64_t budget_bytes = 0;
  uint64_t weights_bytes = 0;  // in the mapping (page-aligned groups)
  // The largest slab of the module's plans, plus 256 KiB for weight pages the kernel maps around
  // a load (fault-around).
  uint64_t activation_bytes = 0;
  uint64_t pinned_bytes = 0;        // weights resident the whole pass
  uint64_t streamed_bytes = 0;      // weights loaded and dropped every pass
  uint64_t planned_peak_bytes = 0;  // the plan's most resident at a step, activations included
  // The work arena: convolutions computed through memoplan's parts (budget_conv2d) lay out their
  // input, weights and output parts there, outside the slab; resident the whole pass.
  uint64_t work_bytes = 0;
  uint64_t smallest_budget_bytes = 0;
  uint32_t steps = 0;          // graph nodes that read weights
  uint32_t groups = 0;         // weights loaded and dropped together
  uint32_t sliced_groups = 0;  // linear and convolution weights computed in slices
  // Calls of a sliced linear or convolution that ran whole (so far): a linear's slices keep
  // outputs bit-identical only for one input row, a convolution's only for the input shape they
  // were checked on (docs/BUDGET.md); otherwise the layer's weight is resident whole and the pass
  // may go over the budget.
  uint64_t slicing_refused = 0;
  std::string weight_file;
  double planning_ms = 0;  // the budget plan alone (no pass runs)
};

// A budget as text (`memoplan run --budget`, memoplan-serve's --budget and config.json "budget"):
// "64MiB", "1.5GiB", "512KB", "100000" (bytes; K/M/G are powers of 1000, KiB/MiB/GiB of 1024)
// or "25%" (of the weights plus the slab). nullopt for text that is neither (and for 0 or 0%).
struct BudgetText {
  uint64_t bytes = 0;  // when given in bytes
  double percent = 0;  // when given as a share (0 < percent <= 1000)
};
std::optional<BudgetText> parse_budget(const std::string& text);

// The budget is below what any plan meets; smallest_bytes is the least one that is.
class BudgetTooSmall : public std::runtime_error {
 public:
  BudgetTooSmall(const std::string& what, uint64_t smallest)
      : std::runtime_error(what), smallest_bytes(smallest) {}
  uint64_t smallest_bytes;
};

// Plans `module` (budgeted by plan()) anew for `budget_bytes` from what it learned then: no pass
// runs; the next pass starts on the new plan (pins loaded or dropped at its start). Throws
// BudgetTooSmall (the module keeps its plan), std::runtime_error when the module has no budget.
// Python: torch.ops.memoplan.set_budget(module, bytes).
BudgetSummary set_budget(const torch::jit::Module& module, uint64_t budget_bytes);

// The module's budget plan; nullopt when plan() gave it no budget.
std::optional<BudgetSummary> budget_summary(const torch::jit::Module& module);

// Measuring: while on, every step (and slice) of the module's passes reads how many of the
// mapping's pages are resident (/proc/self/pagemap), adds the work arena (BudgetSummary::
// work_bytes, all of it) and keeps the most; off by default (a read of the page map per step).
// resident_weight_peak() returns that most since the last reset.
void sample_resident_weights(const torch::jit::Module& module, bool on);
uint64_t resident_weight_peak(const torch::jit::Module& module, bool reset);
// Evicts the weight file from the page cache (its unmapped pages): the next pass loads cold.
void drop_weight_page_cache(const torch::jit::Module& module);

}  // namespace memoplan::torch_ext

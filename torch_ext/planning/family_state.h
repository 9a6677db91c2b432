// What the graph pass learns of one module's shape family (memoplan/planner/family.h): the passes
// its keys profiled, and once three shapes of one structure are fitted, the formulas that give the
// trace of every other shape. A module keeps one per family key under its lock (module_state.h),
// family_plans.cc turns the traces into plans; this file decides what is fitted, predicted,
// dropped and refused.
// No torch headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "memoplan/planner/family.h"
#include "memoplan/planner/trace.h"
#include "memoplan/torch/plan.h"  // PlanDetail

namespace memoplan::torch_ext::runtime_pass {

class FamilyState {
 public:
  static constexpr size_t kShapes = 6;          // profiled shapes kept to fit on
  static constexpr size_t kMinShapes = 3;       // fitted from the third: one checks the others
  static constexpr size_t kMaxPredicted = 256;  // predicted plans kept; the oldest goes first
  static constexpr int kMispredictionsToRefuse = 2;
  // New shapes profiled on their first pass, at most, in a family's life: one that still cannot
  // predict (image sizes whose convolutions round differently at every size) would otherwise
  // profile every new shape; later ones wait out the usual warm-up, like exact keys.
  static constexpr size_t kProfiledAtOnce = 8;

  // A profiled pass of one of its keys: one more shape to fit on. The shapes are grouped by
  // structure (the graph nodes their passes ran and how many allocations they made): a CNN at
  // batch 1 often takes another convolution path than at larger batches, and one such shape must
  // not spoil the others. The largest group (ties: the newest shape's) is fitted once it has three
  // shapes. The family is refused for good when a group's passes still differ (other lifetimes or
  // ops), when no formula fits five shapes of a group, or when it holds kShapes shapes and no
  // group has three.
  void add_shape(const std::string& key, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& visit_nodes, std::shared_ptr<const PlanDetail> detail);
  // The trace of `key`'s pass at `dims`, when the family is fitted and can predict it.
  std::optional<Trace> predict(const std::string& key, const std::vector<int64_t>& dims) const;
  // The graph nodes of the fitted shapes' passes (the predicted trace's visits).
  const std::vector<int64_t>& visit_nodes() const { return visit_nodes_; }

  // The family's placement order (memoplan/planner/planner.h: PlanOptions::row_order): the rows
  // of a `best` plan of its largest fitted shape by offset. Plans of every other shape place
  // their rows in it too, keeping the smaller of that and the strategy's plan: as close to the
  // lower bound as `best`, at the cost of a fast strategy. Empty until the family is fitted.
  const std::vector<size_t>& order() const { return order_; }
  // The profiled pass to learn the order from, when the fitted shapes' largest (by lower bound)
  // is not the one the order was learned on; null otherwise.
  std::shared_ptr<const PlanDetail> order_wanted() const;
  // The order learned on `from`; ignored unless `from` is still what order_wanted() gives.
  // Returns whether it was taken.
  bool set_order(const std::shared_ptr<const PlanDetail>& from, std::vector<size_t> order);
  // The profiled shapes: key, pass and graph nodes (to plan them again in a new order).
  template <typename Visit>
  void for_each_profiled(Visit visit) const {
    for (const Shape& shape : shapes_) visit(shape.key, shape.detail, shape.visit_nodes);
  }
  // A plan for `key` was predicted; returns the key whose plan goes to keep kMaxPredicted, or "".
  std::string note_predicted(const std::string& key);
  // `key`'s predicted plan missed: it is never predicted again. Returns the keys whose predicted
  // plans go (all of them when this was the kMispredictionsToRefuse-th such key).
  std::vector<std::string> note_mispredicted(const std::string& key);
  // Whether a new key of the family is profiled on its first pass: the family has a profiled
  // shape (the module is warm), is not refused, no other of its keys is being profiled, the key's
  // prediction did not miss, and fewer than kProfiledAtOnce shapes were profiled.
  bool profiles_at_once(const std::string& key) const {
    return !refused_ && !shapes_.empty() && profiling_ == 0 && !mispredicted_.count(key) &&
           shapes_added_ < kProfiledAtOnce;
  }
  void profile_started() { ++profiling_; }
  void profile_ended() {
    if (profiling_ > 0) --profiling_;
  }

 private:
  struct Shape {
    std::string key;
    std::vector<int64_t> dims;
    std::shared_ptr<const PlanDetail> detail;  // the profiled trace
    std::vector<int64_t> visit_nodes;          // the graph nodes its pass ran
  };
  std::vector<Shape> shapes_;         // distinct, newest last (at most kShapes)
  std::vector<int64_t> visit_nodes_;  // of the fitted shapes' passes
  std::optional<family::Model> model_;
  std::shared_ptr<const PlanDetail> fitted_largest_;  // the fitted shapes' largest pass
  std::shared_ptr<const PlanDetail> order_from_;      // the pass order_ was learned on
  std::vector<size_t> order_;
  std::vector<std::string> predicted_;            // keys planned from the model, oldest first
  std::unordered_set<std::string> mispredicted_;  // keys never predicted again
  int mispredicted_keys_ = 0;
  int profiling_ = 0;        // its keys being profiled now (one at a time while it collects)
  size_t shapes_added_ = 0;  // distinct shapes profiled in its life
  bool refused_ = false;     // not one family, or predictions missed twice: exact keys only
};

}  // namespace memoplan::torch_ext::runtime_pass

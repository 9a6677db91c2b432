#include "family_state.h"

#include <algorithm>

namespace memoplan::torch_ext::runtime_pass {

void FamilyState::add_shape(const std::string& key, const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& visit_nodes,
                            std::shared_ptr<const PlanDetail> detail) {
  if (refused_) return;
  for (const Shape& shape : shapes_) {
    if (shape.dims == dims) return;
  }
  shapes_.push_back({key, dims, std::move(detail), visit_nodes});
  ++shapes_added_;
  if (shapes_.size() > kShapes) shapes_.erase(shapes_.begin());
  auto same_structure = [](const Shape& a, const Shape& b) {
    return a.visit_nodes == b.visit_nodes &&
           a.detail->trace.allocations.size() == b.detail->trace.allocations.size();
  };
  const Shape* best = nullptr;
  size_t best_count = 0;
  for (const Shape& candidate : shapes_) {  // oldest first: ties go to the newer
    size_t count = 0;
    for (const Shape& other : shapes_) count += same_structure(candidate, other);
    if (count >= best_count) {
      best = &candidate;
      best_count = count;
    }
  }
  if (best_count < kMinShapes) {
    model_.reset();
    if (shapes_.size() >= kShapes) refused_ = true;
    return;
  }
  std::vector<family::Sample> samples;
  std::shared_ptr<const PlanDetail> largest;
  for (const Shape& shape : shapes_) {
    if (!same_structure(shape, *best)) continue;
    samples.push_back({shape.dims, &shape.detail->trace});
    if (!largest || shape.detail->plan.lower_bound_bytes > largest->plan.lower_bound_bytes) {
      largest = shape.detail;
    }
  }
  Result<family::Model> model = family::fit_family(samples);
  if (model) {
    model_ = std::move(*model);
    visit_nodes_ = best->visit_nodes;
    fitted_largest_ = std::move(largest);
    return;
  }
  model_.reset();
  const bool formulas_only = model.error().find("no formula") != std::string::npos;
  if (!formulas_only || samples.size() >= 5) refused_ = true;
}

std::optional<Trace> FamilyState::predict(const std::string& key,
                                          const std::vector<int64_t>& dims) const {
  if (!model_ || refused_ || mispredicted_.count(key)) return std::nullopt;
  Result<Trace> trace = family::instantiate(*model_, dims);
  if (!trace) return std::nullopt;  // a dim that did not vary so far: profiled, then fitted anew
  return std::move(*trace);
}

std::shared_ptr<const PlanDetail> FamilyState::order_wanted() const {
  if (!model_ || refused_ || fitted_largest_ == order_from_) return nullptr;
  return fitted_largest_;
}

bool FamilyState::set_order(const std::shared_ptr<const PlanDetail>& from,
                            std::vector<size_t> order) {
  if (!from || from != order_wanted()) return false;
  order_from_ = from;
  order_ = std::move(order);
  return true;
}

std::string FamilyState::note_predicted(const std::string& key) {
  // A key predicted again (its plan was dropped for one in the learned order) moves to the end.
  predicted_.erase(std::remove(predicted_.begin(), predicted_.end(), key), predicted_.end());
  predicted_.push_back(key);
  if (predicted_.size() <= kMaxPredicted) return "";
  std::string oldest = std::move(predicted_.front());
  predicted_.erase(predicted_.begin());
  return oldest;
}

std::vector<std::string> FamilyState::note_mispredicted(const std::string& key) {
  predicted_.erase(std::remove(predicted_.begin(), predicted_.end(), key), predicted_.end());
  mispredicted_.insert(key);
  if (++mispredicted_keys_ < kMispredictionsToRefuse || refused_) return {};
  refused_ = true;
  std::vector<std::string> keys;
  keys.swap(predicted_);
  return keys;
}

}  // namespace memoplan::torch_ext::runtime_pass

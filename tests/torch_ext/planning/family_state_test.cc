// The shape-family state machine of the graph pass (family_state.h), without torch: which new
// shapes are profiled at once, when the family is fitted, and where it learns its placement order.
#include "family_state.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace memoplan::torch_ext::runtime_pass {
namespace {

// One allocation of 4 L² / 3 bytes at L a multiple of 3 (a formula with a denominator), one of
// 8 L bytes, both live through the pass.
std::shared_ptr<const PlanDetail> pass_at(int64_t length) {
  auto detail = std::make_shared<PlanDetail>();
  const uint64_t l = static_cast<uint64_t>(length);
  for (uint64_t size : {4 * l * l / 3, 8 * l}) {
    Allocation a;
    a.id = detail->trace.allocations.size();
    a.size = size;
    a.begin = a.id;
    a.end = 10;
    detail->trace.allocations.push_back(a);
  }
  detail->plan.lower_bound_bytes = 4 * l * l / 3 + 8 * l;
  return detail;
}

std::string key_of(int64_t length) { return "1x" + std::to_string(length); }

TEST(FamilyState, FittedFromTheThirdShapeAndLearnsItsOrderOnTheLargest) {
  FamilyState family;
  EXPECT_FALSE(family.profiles_at_once(key_of(3)));  // nothing profiled yet: the module is cold
  std::shared_ptr<const PlanDetail> largest;
  for (int64_t length : {3, 9, 6}) {
    auto detail = pass_at(length);
    if (length == 9) largest = detail;
    EXPECT_FALSE(family.predict(key_of(12), {1, 12}).has_value()) << length;
    family.add_shape(key_of(length), {1, length}, {0}, detail);
  }
  const std::optional<Trace> predicted = family.predict(key_of(12), {1, 12});
  ASSERT_TRUE(predicted.has_value());
  EXPECT_EQ(predicted->allocations[0].size, 4u * 144 / 3);
  EXPECT_FALSE(family.predict(key_of(10), {1, 10}).has_value());  // 400 / 3: not a size
  EXPECT_EQ(family.order_wanted(), largest);
  EXPECT_FALSE(family.set_order(pass_at(9), {1, 0}));  // not the pass it wanted
  EXPECT_TRUE(family.set_order(largest, {1, 0}));
  EXPECT_EQ(family.order(), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(family.order_wanted(), nullptr);
}

// A family that keeps being fitted but meets shapes it cannot predict (sizes its formulas make
// fractional there) would profile each of them at once; from the kProfiledAtOnce-th profiled
// shape on, new shapes wait out the warm-up like exact keys.
TEST(FamilyState, ProfilesAtOnceOnlyItsFirstShapes) {
  FamilyState family;
  int64_t length = 3;
  for (size_t added = 0; added < FamilyState::kProfiledAtOnce; ++added, length += 3) {
    if (added > 0) {
      EXPECT_TRUE(family.profiles_at_once(key_of(length + 1))) << added;
    }
    family.add_shape(key_of(length), {1, length}, {0}, pass_at(length));
  }
  EXPECT_TRUE(family.predict(key_of(length), {1, length}).has_value());  // still fitted
  EXPECT_FALSE(family.predict(key_of(length + 1), {1, length + 1}).has_value());
  EXPECT_FALSE(family.profiles_at_once(key_of(length + 1)));
}

}  // namespace
}  // namespace memoplan::torch_ext::runtime_pass

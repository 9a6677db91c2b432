// Shape families (issue 18): fitting each allocation's size as a polynomial of the varying dims,
// predicting unseen shapes exactly, and refusing what is not one family.
#include "memoplan/planner/family.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"

namespace memoplan::family {
namespace {

// An encoder layer's allocations at batch b and length l (d 256, 4 heads, float): what the sizes
// of a real one look like (linear, products, squares, constants, padded, zero).
Trace encoder_pass(int64_t b, int64_t l) {
  const uint64_t d = 256, heads = 4;
  const uint64_t B = static_cast<uint64_t>(b), L = static_cast<uint64_t>(l);
  const std::vector<std::pair<const char*, uint64_t>> rows = {
      {"aten::linear", B * L * 3 * d * 4},       // qkv
      {"aten::bmm", B * heads * L * L * 4},      // scores: B·L²
      {"aten::softmax", B * heads * L * L * 4},  // probabilities
      {"aten::empty", 4096},                     // a workspace of fixed size
      {"aten::bmm", B * L * d * 4},              // context
      {"aten::linear", B * L * d * 4},           // projection
      {"aten::cat", 64 * L + 128},               // padded to a multiple, plus a header
      {"aten::empty", 0},                        // zero-byte request
      {"aten::layer_norm", B * L * d * 4},       // output
  };
  Trace t;
  t.meta.name = "encoder";
  uint64_t tick = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    Allocation a;
    a.id = i;
    a.size = rows[i].second;
    a.begin = tick++;
    a.end = a.begin + 3;  // each lives across the next two
    a.provenance.op = rows[i].first;
    t.allocations.push_back(a);
  }
  t.allocations.back().escapes = true;
  return t;
}

std::vector<uint64_t> sizes(const Trace& t) {
  std::vector<uint64_t> s;
  for (const Allocation& a : t.allocations) s.push_back(a.size);
  return s;
}

TEST(ShapeFamily, ThreeLengthsFitEverySizeAndPredictUnseenLengthsExactly) {
  std::vector<Trace> traces;
  for (int64_t l : {16, 40, 64}) traces.push_back(encoder_pass(1, l));
  std::vector<Sample> samples;
  for (size_t i = 0; i < traces.size(); ++i) {
    samples.push_back({{1, int64_t{16} + 24 * static_cast<int64_t>(i), 256}, &traces[i]});
  }
  Result<Model> model = fit_family(samples);
  ASSERT_TRUE(model.ok()) << model.error();
  EXPECT_EQ(model->varying, std::vector<uint32_t>{1});
  const FitSummary summary = summarize(*model);
  EXPECT_EQ(summary.allocations, 9u);
  EXPECT_EQ(summary.by_degree[0], 2u);  // the workspace and the zero-byte request
  EXPECT_EQ(summary.by_degree[1], 5u);  // linear in L (the padded one with its constant)
  EXPECT_EQ(summary.by_degree[2], 2u);  // L²
  for (int64_t l : {8, 17, 100, 512, 4096}) {
    Result<Trace> predicted = instantiate(*model, {1, l, 256});
    ASSERT_TRUE(predicted.ok()) << predicted.error();
    EXPECT_EQ(sizes(*predicted), sizes(encoder_pass(1, l))) << "L " << l;
    EXPECT_EQ(predicted->meta.input_shapes, "1x" + std::to_string(l) + "x256");
    // The predicted trace plans like a profiled one.
    Result<Plan> plan = plan_trace(*predicted);
    ASSERT_TRUE(plan.ok()) << plan.error();
  }
}

// Sharing claims (memory min) were recorded for one shape's sizes: a predicted trace has none
// (a slice's offset would not follow its sizes), and plans as any other.
TEST(ShapeFamily, PredictedTracesCarryNoSharingClaims) {
  std::vector<Trace> traces;
  for (int64_t l : {16, 40, 64}) {
    traces.push_back(encoder_pass(1, l));
    traces.back().allocations[5].alias_of = 4;  // the projection over the dying context
    traces.back().allocations[4].slice_of = 0;  // and a made-up slice, at a fixed offset
    traces.back().allocations[4].slice_offset = 64;
    ASSERT_EQ(check_trace(traces.back()), "");
  }
  std::vector<Sample> samples;
  for (size_t i = 0; i < traces.size(); ++i) {
    samples.push_back({{1, int64_t{16} + 24 * static_cast<int64_t>(i), 256}, &traces[i]});
  }
  Result<Model> model = fit_family(samples);
  ASSERT_TRUE(model.ok()) << model.error();
  Result<Trace> predicted = instantiate(*model, {1, 4096, 256});
  ASSERT_TRUE(predicted.ok()) << predicted.error();
  for (const Allocation& a : predicted->allocations) {
    EXPECT_EQ(a.alias_of, kNoRow);
    EXPECT_EQ(a.slice_of, kNoRow);
  }
  PlanOptions options;
  options.aliases = true;
  EXPECT_TRUE(plan_trace(*predicted, options).ok());
}

TEST(ShapeFamily, BatchAndLengthTogetherFitProducts) {
  std::vector<Trace> traces;
  std::vector<std::vector<int64_t>> dims;
  for (int64_t b : {1, 2, 4}) {
    for (int64_t l : {16, 32, 48}) {
      traces.push_back(encoder_pass(b, l));
      dims.push_back({b, l});
    }
  }
  std::vector<Sample> samples;
  for (size_t i = 0; i < traces.size(); ++i) samples.push_back({dims[i], &traces[i]});
  Result<Model> model = fit_family(samples);
  ASSERT_TRUE(model.ok()) << model.error();
  EXPECT_EQ(model->varying.size(), 2u);
  EXPECT_EQ(summarize(*model).by_degree[3], 2u);  // B·L²
  for (auto [b, l] : {std::pair<int64_t, int64_t>{3, 100}, {8, 7}, {1, 1}}) {
    Result<Trace> predicted = instantiate(*model, {b, l});
    ASSERT_TRUE(predicted.ok()) << predicted.error();
    EXPECT_EQ(sizes(*predicted), sizes(encoder_pass(b, l))) << b << "x" << l;
  }
}

TEST(ShapeFamily, EveryFormulaIsCheckedOnAShapeItWasNotSolvedOn) {
  // Two shapes determine a one-term formula and check nothing beyond it: 64 L + 128 needs two
  // terms, so two shapes cannot fit it; a third can.
  Trace a = encoder_pass(1, 16), b = encoder_pass(1, 32), c = encoder_pass(1, 48);
  Result<Model> two = fit_family({{{16}, &a}, {{32}, &b}});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().find("allocation 6 (aten::cat): no formula of at most 1 terms"),
            std::string::npos)
      << two.error();
  EXPECT_TRUE(fit_family({{{16}, &a}, {{32}, &b}, {{48}, &c}}).ok());
}

TEST(ShapeFamily, SizesThatAreNotPolynomialAreRefused) {
  // A stride-2 convolution's output side: floor((H - 1) / 2) + 1, squared, 16 channels.
  std::vector<Trace> traces;
  std::vector<Sample> samples;
  const std::vector<int64_t> sides = {64, 65, 97, 130};
  for (int64_t h : sides) {
    Trace t = encoder_pass(1, 8);
    const uint64_t out = static_cast<uint64_t>((h - 1) / 2 + 1);
    t.allocations[3].size = 16 * out * out * 4;
    traces.push_back(t);
  }
  for (size_t i = 0; i < sides.size(); ++i) samples.push_back({{sides[i]}, &traces[i]});
  Result<Model> model = fit_family(samples);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().find("allocation 3"), std::string::npos) << model.error();
  // Even sides only: the side is H / 2 there, and that fits.
  std::vector<Sample> even = {samples[0], samples[3]};
  Trace t96 = encoder_pass(1, 8);
  t96.allocations[3].size = 16 * 48 * 48 * 4;
  even.push_back({{96}, &t96});
  EXPECT_TRUE(fit_family(even).ok()) << fit_family(even).error();
}

TEST(ShapeFamily, DifferentSequencesAreNotOneFamily) {
  Trace a = encoder_pass(1, 16), b = encoder_pass(1, 32), c = encoder_pass(1, 48);
  Trace extra = c;
  Allocation more = extra.allocations.back();
  more.id = 99;
  more.begin = more.end = 50;
  extra.allocations.push_back(more);
  Result<Model> model = fit_family({{{16}, &a}, {{32}, &b}, {{48}, &extra}});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().find("made 10 allocations"), std::string::npos) << model.error();

  Trace other_op = c;
  other_op.allocations[4].provenance.op = "aten::matmul";
  model = fit_family({{{16}, &a}, {{32}, &b}, {{48}, &other_op}});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().find("allocation 4 differs in op (aten::bmm vs aten::matmul)"),
            std::string::npos)
      << model.error();

  Trace other_life = c;
  other_life.allocations[2].end += 1;
  model = fit_family({{{16}, &a}, {{32}, &b}, {{48}, &other_life}});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().find("allocation 2 differs in lifetime"), std::string::npos);
}

TEST(ShapeFamily, BadSampleSetsAreRefusedWithTheirReason) {
  Trace a = encoder_pass(1, 16), b = encoder_pass(1, 32);
  EXPECT_NE(fit_family({}).error().find("no samples"), std::string::npos);
  EXPECT_NE(fit_family({{{16}, &a}, {{16}, &a}}).error().find("fewer than two distinct"),
            std::string::npos);
  EXPECT_NE(fit_family({{{16}, &a}, {{16}, &b}}).error().find("sizes do not follow from the dims"),
            std::string::npos);
  EXPECT_NE(fit_family({{{16}, &a}, {{1, 32}, &b}}).error().find("different counts"),
            std::string::npos);
  Trace c = encoder_pass(1, 48), d = encoder_pass(1, 64);
  const Result<Model> four = fit_family(
      {{{1, 1, 1, 16}, &a}, {{2, 2, 2, 32}, &b}, {{3, 3, 3, 48}, &c}, {{4, 4, 4, 64}, &d}});
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.error().find("4 dims vary"), std::string::npos) << four.error();
}

TEST(ShapeFamily, InstantiateRefusesAnotherFamilyAndSizesOutsideTheSamples) {
  // Half of L², in bytes: integer at even L only.
  std::vector<Trace> traces;
  for (int64_t l : {2, 4, 6}) {
    Trace t = encoder_pass(1, l);
    t.allocations[3].size = static_cast<uint64_t>(l * l / 2);
    traces.push_back(t);
  }
  Result<Model> model =
      fit_family({{{1, 2}, &traces[0]}, {{1, 4}, &traces[1]}, {{1, 6}, &traces[2]}});
  ASSERT_TRUE(model.ok()) << model.error();
  EXPECT_EQ(model->sizes[3].denominator, 2);
  Result<Trace> even = instantiate(*model, {1, 10});
  ASSERT_TRUE(even.ok()) << even.error();
  EXPECT_EQ(even->allocations[3].size, 50u);
  Result<Trace> odd = instantiate(*model, {1, 3});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().find("allocation 3: its formula gives no size in bytes at dims 1x3"),
            std::string::npos)
      << odd.error();
  EXPECT_NE(instantiate(*model, {2, 4}).error().find("another family"), std::string::npos);
  EXPECT_NE(instantiate(*model, {4}).error().find("another count"), std::string::npos);
}

}  // namespace
}  // namespace memoplan::family

#include "memoplan/heapmap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "random_traces.h"
#include "xml_tree.h"

namespace memoplan {
namespace {

using testing::Element;

std::unique_ptr<Element> parse_svg(const std::string& svg) {
  std::string error;
  auto root = testing::parse_xml(svg, error);
  EXPECT_TRUE(root) << "not well-formed: " << error;
  if (root) {
    EXPECT_EQ(root->name, "svg");
  }
  return root;
}

Allocation allocation(uint64_t id, uint64_t size, uint64_t begin, uint64_t end, std::string op) {
  Allocation a;
  a.id = id, a.size = size, a.begin = begin, a.end = end;
  a.provenance.op = std::move(op);
  return a;
}

// Five rows: A, C at the bottom and top of a 4 KiB slab, B between them, a zero-byte row and a
// nameless workspace. The slab (4096) is above the lower bound (3072), which is B's top edge.
struct HandPlan {
  Trace trace;
  Plan plan;
};
HandPlan hand_plan() {
  HandPlan hand;
  hand.trace.meta.name = "hand";
  hand.trace.allocations = {allocation(0, 1024, 0, 4, "conv"), allocation(1, 2048, 2, 6, "relu"),
                            allocation(2, 1024, 4, 8, "conv"), allocation(3, 0, 1, 2, "empty"),
                            allocation(4, 512, 6, 7, "")};
  Plan& plan = hand.plan;
  plan.strategy = "by hand";
  plan.offsets = {0, 1024, 3072, 0, 1024};
  plan.slab_bytes = 4096;
  plan.lower_bound_bytes = planner::offset_lower_bound(planner::make_problem(hand.trace).value());
  plan.trace_fingerprint = trace_fingerprint(hand.trace);
  EXPECT_EQ(plan.lower_bound_bytes, 3072u);
  EXPECT_TRUE(validate_plan(hand.trace, plan).valid);
  return hand;
}

// The allocation rectangle whose tooltip names allocation `id`.
const Element* rect_of(const Element& root, uint64_t id) {
  for (const Element* rect : root.find_id("allocations")->all("rect")) {
    const auto titles = rect->all("title");
    if (!titles.empty() &&
        titles[0]->text.find("#" + std::to_string(id) + ":") != std::string::npos) {
      return rect;
    }
  }
  ADD_FAILURE() << "no rectangle for allocation " << id;
  return nullptr;
}

double line_y(const Element& root, const std::string& id) {
  const Element* group = root.find_id(id);
  EXPECT_TRUE(group) << "no element with id " << id;
  return group ? group->all("line").at(0)->number("y1") : -1;
}

TEST(Heapmap, HandPlanHasOneRectanglePerNonEmptyAllocation) {
  const HandPlan hand = hand_plan();
  const std::string svg = render_heapmap_svg(hand.trace, hand.plan);
  const auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  ASSERT_TRUE(root->find_id("allocations"));
  EXPECT_EQ(root->find_id("allocations")->all("rect").size(), 4u);
  EXPECT_FALSE(root->find_id("occupancy"));

  const Element *a = rect_of(*root, 0), *b = rect_of(*root, 1), *c = rect_of(*root, 2);
  const Element* workspace = rect_of(*root, 4);
  ASSERT_TRUE(a && b && c && workspace);
  EXPECT_NE(a->all("title")[0]->text.find("conv"), std::string::npos);
  EXPECT_NE(workspace->all("title")[0]->text.find("(no op)"), std::string::npos);
  // Time runs right, addresses up: C starts later than A and sits above it; B is twice as tall.
  EXPECT_GT(c->number("x"), a->number("x"));
  EXPECT_LT(c->number("y"), a->number("y"));
  EXPECT_NEAR(a->number("width"), c->number("width"), 0.15);
  EXPECT_NEAR(b->number("height"), 2 * a->number("height"), 0.15);
  // A and C live 4 ticks, the workspace 1.
  EXPECT_NEAR(workspace->number("width") * 4, a->number("width"), 0.5);

  // The slab top is C's top edge, the lower bound B's.
  EXPECT_NEAR(line_y(*root, "slab-top"), c->number("y"), 0.15);
  EXPECT_NEAR(line_y(*root, "lower-bound"), b->number("y"), 0.15);
  EXPECT_NE(svg.find("lower bound 3 KiB"), std::string::npos);
  EXPECT_NE(svg.find("slab 4 KiB"), std::string::npos);
  EXPECT_NE(svg.find("ratio 1.333"), std::string::npos);
}

// memory min: rows placed in bytes they share get a dashed outline that names the row they share
// with; the header gives both bounds. A plan without sharing draws none.
TEST(Heapmap, SharedRowsAreOutlinedAndNamed) {
  Trace trace;
  trace.meta.name = "shared";
  trace.allocations = {allocation(0, 1024, 0, 3, "conv"), allocation(1, 1024, 2, 5, "relu"),
                       allocation(2, 1024, 1, 6, "conv")};
  trace.allocations[1].alias_of = 0;
  PlanOptions options;
  options.aliases = true;
  Result<Plan> plan = plan_trace(trace, options);
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->aliased_rows, 1u);
  const std::string svg = render_heapmap_svg(trace, *plan);
  auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  const Element* shared = root->find_id("shared");
  ASSERT_TRUE(shared);
  const auto rects = shared->all("rect");
  ASSERT_EQ(rects.size(), 1u);
  EXPECT_NE(rects[0]->all("title").at(0)->text.find("#1 shares bytes with #0"), std::string::npos);
  EXPECT_NE(svg.find("offset bound"), std::string::npos);

  Result<Plan> plain = plan_trace(trace);
  ASSERT_TRUE(plain.ok());
  auto plain_root = parse_svg(render_heapmap_svg(trace, *plain));
  ASSERT_TRUE(plain_root);
  EXPECT_EQ(plain_root->find_id("shared"), nullptr);
}

TEST(Heapmap, LowerBoundLineAndLiveCurveCanBeLeftOut) {
  const HandPlan hand = hand_plan();
  HeapmapOptions options;
  options.show_lower_bound = false;
  options.show_live_bytes = false;
  const auto root = parse_svg(render_heapmap_svg(hand.trace, hand.plan, options));
  ASSERT_TRUE(root);
  EXPECT_FALSE(root->find_id("lower-bound"));
  EXPECT_FALSE(root->find_id("live-bytes"));
  EXPECT_TRUE(root->find_id("slab-top"));
}

// Every y the path visits, from "M x y" and "V y" commands.
std::vector<double> path_ys(const std::string& d) {
  std::vector<double> ys;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 'V') ys.push_back(std::stod(d.substr(i + 1)));
    if (d[i] == 'M') ys.push_back(std::stod(d.substr(d.find(' ', i) + 1)));
  }
  return ys;
}

double curve_peak_y(const Element& root) {
  const Element* curve = root.find_id("live-bytes");
  EXPECT_TRUE(curve);
  if (!curve) return -1;
  const std::vector<double> ys = path_ys(curve->attributes.at("d"));
  EXPECT_FALSE(ys.empty());
  // SVG y grows downwards: the highest point is the smallest y.
  return ys.empty() ? -1 : *std::min_element(ys.begin(), ys.end());
}

TEST(Heapmap, LiveBytesCurvePeaksAtTheLowerBound) {
  // In the hand plan A dies at tick 4 as C is made: counting both would overshoot by 1 KiB.
  const HandPlan hand = hand_plan();
  const auto hand_root = parse_svg(render_heapmap_svg(hand.trace, hand.plan));
  ASSERT_TRUE(hand_root);
  EXPECT_NEAR(curve_peak_y(*hand_root), line_y(*hand_root, "lower-bound"), 0.15);

  // Odd sizes, where rounding to the plan alignment matters, and many equal ticks.
  Trace trace = testing::random_trace(testing::TraceShape::kTies, 300, 5);
  for (Allocation& a : trace.allocations) a.size = a.size ? a.size / 1000 + 1 : 0;
  PlanOptions options;
  options.strategy = "first_fit";
  options.min_alignment = 4096;
  const Result<Plan> plan = plan_trace(trace, options);
  ASSERT_TRUE(plan) << plan.error();
  const auto root = parse_svg(render_heapmap_svg(trace, *plan));
  ASSERT_TRUE(root);
  EXPECT_NEAR(curve_peak_y(*root), line_y(*root, "lower-bound"), 0.15);
}

TEST(Heapmap, EscapesTraceText) {
  HandPlan hand = hand_plan();
  hand.trace.allocations[0].provenance.op = "<script>&\"'";
  hand.trace.allocations[1].provenance.op = "bad\xff\xfe utf8\x01";
  hand.trace.allocations[2].provenance.op = "caf\xc3\xa9";  // valid UTF-8 passes through
  hand.plan.strategy = "best</text>";
  HeapmapOptions options;
  options.title = "a<b & \"c\"";
  const std::string svg = render_heapmap_svg(hand.trace, hand.plan, options);
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_EQ(svg.find("best</text>"), std::string::npos);
  EXPECT_EQ(svg.find('\xff'), std::string::npos);
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;&amp;&quot;&apos;"), std::string::npos);
  EXPECT_NE(svg.find("caf\xc3\xa9"), std::string::npos);

  const auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  bool title_found = false;
  for (const Element* text : root->all("text")) title_found |= text->text == "a<b & \"c\"";
  EXPECT_TRUE(title_found);
  EXPECT_NE(rect_of(*root, 0)->all("title")[0]->text.find("<script>&\"'"), std::string::npos);
  EXPECT_NE(rect_of(*root, 1)->all("title")[0]->text.find("bad\xEF\xBF\xBD\xEF\xBF\xBD utf8"),
            std::string::npos);
}

TEST(Heapmap, ThinBlocksGoToTheOccupancyLayerWhereTheyAre) {
  const HandPlan hand = hand_plan();
  const auto exact = parse_svg(render_heapmap_svg(hand.trace, hand.plan));
  HeapmapOptions options;
  options.max_rects = 0;
  const auto shaded = parse_svg(render_heapmap_svg(hand.trace, hand.plan, options));
  ASSERT_TRUE(exact && shaded);
  EXPECT_TRUE(shaded->find_id("allocations")->all("rect").empty());
  ASSERT_TRUE(shaded->find_id("occupancy"));
  const auto cells = shaded->find_id("occupancy")->all("rect");
  const auto blocks = exact->find_id("allocations")->all("rect");
  ASSERT_FALSE(cells.empty());
  const auto inside = [](const Element* r, double x, double y, double slack) {
    return x >= r->number("x") - slack && x <= r->number("x") + r->number("width") + slack &&
           y >= r->number("y") - slack && y <= r->number("y") + r->number("height") + slack;
  };
  // Every block's centre is shaded, and every shaded pixel lies on a block, give or take the one
  // pixel a cell boundary can add (cells are 1 px at this size).
  for (const Element* block : blocks) {
    const double x = block->number("x") + block->number("width") / 2;
    const double y = block->number("y") + block->number("height") / 2;
    EXPECT_TRUE(std::any_of(cells.begin(), cells.end(),
                            [&](const Element* cell) { return inside(cell, x, y, 0); }));
  }
  size_t stray_pixels = 0;
  for (const Element* cell : cells) {
    for (double x = cell->number("x") + 0.5; x < cell->number("x") + cell->number("width"); ++x) {
      for (double y = cell->number("y") + 0.5; y < cell->number("y") + cell->number("height");
           ++y) {
        stray_pixels += std::none_of(blocks.begin(), blocks.end(),
                                     [&](const Element* block) { return inside(block, x, y, 1); });
      }
    }
  }
  EXPECT_EQ(stray_pixels, 0u);
}

TEST(Heapmap, HundredThousandAllocationsStaySmallAndWellFormed) {
  const Trace trace = testing::random_trace(testing::TraceShape::kDnnLike, 100000, 11);
  PlanOptions plan_options;
  plan_options.strategy = "bump";  // fast at this size; any valid plan exercises the renderer
  const Result<Plan> plan = plan_trace(trace, plan_options);
  ASSERT_TRUE(plan) << plan.error();
  HeapmapOptions options;
  const std::string svg = render_heapmap_svg(trace, *plan, options);
  EXPECT_LT(svg.size(), 3u << 20);
  const auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  const size_t drawn = root->find_id("allocations")->all("rect").size();
  EXPECT_LE(drawn, options.max_rects);
  ASSERT_TRUE(root->find_id("occupancy"));
  EXPECT_FALSE(root->find_id("occupancy")->all("rect").empty());
  // More rectangles than tooltips allowed: none carries one.
  if (drawn > options.max_tooltips) {
    EXPECT_TRUE(root->find_id("allocations")->all("title").empty());
  }

  // A second, independent parser, where one is installed.
  if (std::system("python3 -c 'import xml.etree.ElementTree' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 not available for the second well-formedness check";
  }
  const std::string path = ::testing::TempDir() + "heapmap_100k.svg";
  std::ofstream(path, std::ios::binary) << svg;
  const std::string command =
      "python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' " + path;
  EXPECT_EQ(std::system(command.c_str()), 0);
  std::remove(path.c_str());
}

TEST(Heapmap, ColoursByOpAreStableAndBySizeDiffer) {
  const HandPlan hand = hand_plan();
  const auto by_op = parse_svg(render_heapmap_svg(hand.trace, hand.plan));
  ASSERT_TRUE(by_op);
  // A parent group carries the fill; the two "conv" blocks share it, "relu" gets another.
  const auto fill_of = [&](const Element& root, uint64_t id) {
    for (const Element* group : root.find_id("allocations")->all("g")) {
      for (const auto& child : group->children) {
        if (child.get() == rect_of(root, id)) return group->attributes.at("fill");
      }
    }
    return std::string();
  };
  EXPECT_EQ(fill_of(*by_op, 0), fill_of(*by_op, 2));
  EXPECT_NE(fill_of(*by_op, 0), fill_of(*by_op, 1));

  HeapmapOptions options;
  options.coloring = HeapmapColoring::kBySize;
  const auto by_size = parse_svg(render_heapmap_svg(hand.trace, hand.plan, options));
  ASSERT_TRUE(by_size);
  EXPECT_EQ(fill_of(*by_size, 0), fill_of(*by_size, 2));  // both 1 KiB
  EXPECT_NE(fill_of(*by_size, 1), fill_of(*by_size, 4));  // 2 KiB and 512 B
}

TEST(Heapmap, EmptyTraceStillRendersAxes) {
  Trace trace;
  Plan plan;
  plan.strategy = "naive";
  const auto root = parse_svg(render_heapmap_svg(trace, plan));
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->find_id("axes"));
  EXPECT_TRUE(root->find_id("allocations")->all("rect").empty());
}

TEST(Heapmap, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(24ull << 20), "24 MiB");
  EXPECT_EQ(format_bytes((1ull << 30) + (20ull << 20)), "1.02 GiB");
  EXPECT_EQ(format_bytes((1ull << 20) - 1), "1 MiB");  // not "1024 KiB"
  EXPECT_EQ(format_bytes(768ull << 20), "768 MiB");
}

}  // namespace
}  // namespace memoplan

// FluidML's layout plan (planner/src/layout): sequences partition the graph into paths, the DP is
// exact on a chain, the plan is never better than brute force and matches it where the votes
// agree, and bad graphs are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "memoplan/layout/layout.h"

namespace memoplan::layout {
namespace {

// A random cost table per node: cost[node][combination of its incident layouts].
struct RandomCosts {
  std::vector<std::vector<double>> table;
  RandomCosts(const LayoutGraph& g, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(1.0, 10.0);
    for (const auto& node : g.nodes) {
      size_t combos = 1;
      for (int e : node.inputs) combos *= g.edges[e].layouts;
      for (int e : node.outputs) combos *= g.edges[e].layouts;
      std::vector<double> t(combos);
      for (double& x : t) x = u(rng);
      table.push_back(t);
    }
  }
  void install(LayoutGraph& g) const {
    const LayoutGraph* graph = &g;
    auto table_copy = table;
    g.cost = [graph, table_copy](int v, const std::vector<int>& in, const std::vector<int>& out) {
      size_t index = 0;
      const auto& node = graph->nodes[v];
      for (size_t i = 0; i < in.size(); ++i)
        index = index * graph->edges[node.inputs[i]].layouts + in[i];
      for (size_t i = 0; i < out.size(); ++i) {
        index = index * graph->edges[node.outputs[i]].layouts + out[i];
      }
      return table_copy[v][index];
    };
  }
};

LayoutGraph chain(int nodes, int layouts) {
  LayoutGraph g;
  int previous = g.add_edge("input", layouts);
  for (int v = 0; v < nodes; ++v) {
    const int next = g.add_edge("t" + std::to_string(v), layouts);
    g.add_node("op" + std::to_string(v), {previous}, {next});
    previous = next;
  }
  return g;
}

// A random DAG: each node takes one or two earlier tensors and makes one.
LayoutGraph random_dag(int nodes, int max_layouts, unsigned seed) {
  std::mt19937 rng(seed);
  LayoutGraph g;
  std::vector<int> tensors{g.add_edge("input", 1 + rng() % max_layouts)};
  for (int v = 0; v < nodes; ++v) {
    std::vector<int> inputs{tensors[rng() % tensors.size()]};
    if (rng() % 2 && tensors.size() > 1) {
      const int other = tensors[rng() % tensors.size()];
      if (other != inputs[0]) inputs.push_back(other);
    }
    const int out = g.add_edge("t" + std::to_string(v), 1 + rng() % max_layouts);
    g.add_node("op" + std::to_string(v), inputs, {out});
    tensors.push_back(out);
  }
  return g;
}

TEST(LayoutSequences, PartitionEveryNodeIntoPaths) {
  for (unsigned seed = 0; seed < 50; ++seed) {
    LayoutGraph g = random_dag(12, 3, seed);
    const auto sequences = extract_sequences(g);
    std::multiset<int> seen;
    for (const auto& s : sequences) {
      seen.insert(s.begin(), s.end());
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        bool joined = false;
        for (int e : g.nodes[s[i]].outputs) {
          const auto& c = g.edges[e].consumers;
          joined |= std::find(c.begin(), c.end(), s[i + 1]) != c.end();
        }
        EXPECT_TRUE(joined) << "seed " << seed << ": sequence is not a path";
      }
    }
    EXPECT_EQ(seen.size(), g.nodes.size());
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), g.nodes.size()) << "seed " << seed;
  }
}

TEST(LayoutSequences, TheFirstSequenceIsTheLongestPath) {
  // input -> a -> b -> c -> d, and a -> x -> d: the first sequence is a b c d.
  LayoutGraph g;
  const int in = g.add_edge("in", 1), ta = g.add_edge("a", 1), tb = g.add_edge("b", 1),
            tc = g.add_edge("c", 1), tx = g.add_edge("x", 1), td = g.add_edge("d", 1);
  g.add_node("a", {in}, {ta});
  g.add_node("b", {ta}, {tb});
  g.add_node("c", {tb}, {tc});
  g.add_node("x", {ta}, {tx});
  g.add_node("d", {tc, tx}, {td});
  const auto sequences = extract_sequences(g);
  ASSERT_EQ(sequences.size(), 2u);
  EXPECT_EQ(sequences[0], (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(sequences[1], (std::vector<int>{3}));
}

TEST(LayoutPlan, TheDynamicProgramIsExactOnAChain) {
  for (unsigned seed = 0; seed < 30; ++seed) {
    LayoutGraph g = chain(7, 3);
    RandomCosts(g, seed).install(g);
    ASSERT_TRUE(check_graph(g));
    const LayoutPlan plan = plan_layouts(g);
    const auto exact = brute_force_layouts(g);
    ASSERT_TRUE(exact);
    EXPECT_DOUBLE_EQ(plan.cost, exact->cost) << "seed " << seed;
    EXPECT_EQ(plan.sequences, 1);
    EXPECT_EQ(plan.conflicts, 0);
    EXPECT_DOUBLE_EQ(plan.cost, total_cost(g, plan.layouts));
  }
}

TEST(LayoutPlan, NeverBetterThanBruteForceAndUsuallyClose) {
  int exact_hits = 0, fluidml_exact_hits = 0, runs = 0, conflicts = 0;
  double worst = 1.0, fluidml_worst = 1.0, fluidml_sum = 0;
  for (unsigned seed = 0; seed < 60; ++seed) {
    LayoutGraph g = random_dag(8, 3, seed);
    RandomCosts(g, 1000 + seed).install(g);
    ASSERT_TRUE(check_graph(g));
    const LayoutPlan plan = plan_layouts(g);
    const auto exact = brute_force_layouts(g);
    ASSERT_TRUE(exact);
    ASSERT_EQ(plan.layouts.size(), g.edges.size());
    for (size_t e = 0; e < g.edges.size(); ++e) {
      ASSERT_GE(plan.layouts[e], 0);
      ASSERT_LT(plan.layouts[e], g.edges[e].layouts);
    }
    EXPECT_GE(plan.cost, exact->cost - 1e-9);
    EXPECT_DOUBLE_EQ(plan.cost, total_cost(g, plan.layouts));
    EXPECT_LE(plan.cost, plan.cost_before_refining);
    exact_hits += plan.cost <= exact->cost + 1e-9;
    fluidml_exact_hits += plan.cost_before_refining <= exact->cost + 1e-9;
    worst = std::max(worst, plan.cost / exact->cost);
    fluidml_worst = std::max(fluidml_worst, plan.cost_before_refining / exact->cost);
    fluidml_sum += plan.cost_before_refining / exact->cost;
    conflicts += plan.conflicts;
    ++runs;
  }
  // Independent random costs per node are hard for the vote (every node's best choice for its
  // off-sequence edges is unrelated to its neighbours'): FluidML's plan alone is exact on about
  // half of these graphs (7% over the optimum on average here); refined, on about two thirds.
  std::printf("FluidML exact %d/%d, mean %.3f, worst %.3f; refined exact %d/%d, worst %.3f\n",
              fluidml_exact_hits, runs, fluidml_sum / runs, fluidml_worst, exact_hits, runs, worst);
  EXPECT_GT(exact_hits, runs / 2);
  EXPECT_GT(exact_hits, fluidml_exact_hits);
  EXPECT_LT(fluidml_sum / runs, 1.15);
  EXPECT_LT(fluidml_worst, 1.6);
  EXPECT_GT(conflicts, 0) << "no conflict arose: the vote path is untested";
}

// `operands` ops each make a tensor from the input; one concatenation joins them all, priced per
// operand (a random cost for each operand's layout against the output's) plus its output's own.
LayoutGraph concatenation(int operands, bool separable, unsigned seed) {
  LayoutGraph g;
  const int input = g.add_edge("input", 1);
  std::vector<int> parts;
  for (int i = 0; i < operands; ++i) {
    parts.push_back(g.add_edge("part" + std::to_string(i), 3));
    g.add_node("op" + std::to_string(i), {input}, {parts.back()});
  }
  const int joined = g.add_edge("joined", 3);
  g.add_node("cat", parts, {joined});
  if (separable) g.nodes.back().coupled_inputs = 0;
  g.add_node("use", {joined}, {g.add_edge("output", 1)});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(1.0, 10.0);
  std::vector<double> table(static_cast<size_t>(operands + 3) * 9);
  for (double& x : table) x = u(rng);
  const int cat = operands;
  g.cost = [table, cat](int v, const std::vector<int>& in, const std::vector<int>& out) {
    if (v < cat) return table[static_cast<size_t>(v) * 9 + static_cast<size_t>(out[0])];
    if (v > cat) return table[static_cast<size_t>(v) * 9 + static_cast<size_t>(in[0])];
    double sum = table[static_cast<size_t>(cat) * 9 + static_cast<size_t>(out[0])];
    for (size_t i = 0; i < in.size(); ++i) {
      sum += table[(static_cast<size_t>(cat) + 1 + i % 2) * 9 + static_cast<size_t>(in[i] * 3) +
                   static_cast<size_t>(out[0])];
    }
    return sum;
  };
  return g;
}

TEST(LayoutPlan, SeparableInputsArePricedOneAtATime) {
  for (unsigned seed = 0; seed < 10; ++seed) {
    LayoutGraph joint = concatenation(6, false, seed);
    LayoutGraph separable = concatenation(6, true, seed);
    ASSERT_TRUE(check_graph(separable));
    const LayoutPlanOptions dp_only{false};  // the refinement's evaluations are the same
    const LayoutPlan a = plan_layouts(joint, dp_only);
    const LayoutPlan b = plan_layouts(separable, dp_only);
    EXPECT_DOUBLE_EQ(a.cost, b.cost) << "seed " << seed;
    EXPECT_DOUBLE_EQ(b.cost, total_cost(separable, b.layouts));
    EXPECT_LT(b.evaluations * 10, a.evaluations) << "seed " << seed;
  }
  // DenseNet's longest concatenation has 25 operands: 3^26 assignments weighed together.
  LayoutGraph wide = concatenation(25, true, 7);
  ASSERT_TRUE(check_graph(wide));
  const LayoutPlan plan = plan_layouts(wide);
  EXPECT_LT(plan.evaluations, 100000u);
  EXPECT_DOUBLE_EQ(plan.cost, total_cost(wide, plan.layouts));
  wide.nodes[25].coupled_inputs = 26;
  EXPECT_FALSE(check_graph(wide)) << "more coupled inputs than inputs";
}

TEST(LayoutPlan, BadGraphsAreRefused) {
  LayoutGraph g = chain(3, 2);
  EXPECT_FALSE(check_graph(g)) << "no cost function";
  g.cost = [](int, const std::vector<int>&, const std::vector<int>&) { return 1.0; };
  EXPECT_TRUE(check_graph(g));
  LayoutGraph cyclic = g;
  cyclic.nodes[0].inputs.push_back(3);  // op0 takes op2's output
  cyclic.edges[3].consumers.push_back(0);
  const auto result = check_graph(cyclic);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().find("cycle"), std::string::npos);
  LayoutGraph out_of_range = g;
  out_of_range.nodes[1].outputs.push_back(99);
  EXPECT_FALSE(check_graph(out_of_range));
  LayoutGraph huge = chain(40, 3);
  huge.cost = g.cost;
  EXPECT_FALSE(brute_force_layouts(huge));
}

}  // namespace
}  // namespace memoplan::layout

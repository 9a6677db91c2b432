// FluidML's Table 3 form: the layout plan (longest sequences, DP, majority vote) against brute
// force on two small graphs, with every node's cost measured on this machine with memoplan's
// GEMM. Each tensor is stored row-major (layout 0) or column-major (layout 1); a matmul node
// reads its input in either and writes its output in either (column-major output: it computes
// C^T = W X^T, the weight as left operand), an add node joins two branches and pays a transpose
// for each input not in its output's layout.
//
//   build-bench/bench/layout_table            # prints the table (markdown)
//
// Graphs (FluidML Fig. 11): "linear" x -> mm1 -> mm2 -> mm3 -> mm4; "branched" x -> mm1 ->
// {mm2 -> mm3, mm4} -> add -> mm5. Matmul shapes alternate so layouts matter.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "memoplan/kernels/gemm.h"
#include "memoplan/layout/layout.h"

namespace {

using namespace memoplan;
using kernels::MatrixView;

double fastest_ms(const std::function<void()>& call, int repetitions = 7) {
  call();
  double best = 1e300;
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::vector<float> random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Y (M x N) = X (M x K) W^T, W stored N x K; X and Y each row- or column-major.
double matmul_ms(int64_t m, int64_t k, int64_t n, int in_layout, int out_layout) {
  const std::vector<float> x = random(m * k, 1), w = random(n * k, 2);
  std::vector<float> y(m * n);
  const kernels::GemmConfig config = kernels::default_config();
  const MatrixView x_view = in_layout == 0 ? MatrixView{x.data(), m, k, k, 1}
                                           : MatrixView{x.data(), k, m, m, 1}.transposed();
  const MatrixView w_t = MatrixView{w.data(), n, k, k, 1}.transposed();
  if (out_layout == 0) {
    const kernels::PackedB packed(w_t, config.kernel.nr);  // at plan time
    return fastest_ms([&] { kernels::gemm(x_view, packed, y.data(), n, {}, config); });
  }
  // Y^T (N x M) = W X^T: the weight is the left operand, X^T is packed on every call.
  const MatrixView w_view{w.data(), n, k, k, 1};
  return fastest_ms([&] { kernels::gemm(w_view, x_view.transposed(), y.data(), m, {}, config); });
}

// Z = X + Y (M x N each); an input whose layout differs from Z's is read transposed.
double add_ms(int64_t m, int64_t n, int a_layout, int b_layout, int out_layout) {
  const std::vector<float> a = random(m * n, 3), b = random(m * n, 4);
  std::vector<float> z(m * n);
  auto at = [&](const std::vector<float>& v, int layout, int64_t i, int64_t j) {
    return layout == out_layout ? v[i * n + j] : v[j * m + i];
  };
  return fastest_ms([&] {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) z[i * n + j] = at(a, a_layout, i, j) + at(b, b_layout, i, j);
    }
  });
}

struct MatmulNode {
  int64_t m, k, n;
};

void report(const char* name, layout::LayoutGraph& g) {
  const auto exact = layout::brute_force_layouts(g);
  layout::LayoutPlanOptions raw;
  raw.refine = false;
  const layout::LayoutPlan fluidml = layout::plan_layouts(g, raw);
  const layout::LayoutPlan refined = layout::plan_layouts(g);
  const double all_row_major = layout::total_cost(g, layout::Assignment(g.edges.size(), 0));
  std::string choice;
  for (int l : fluidml.layouts) choice += l ? "C" : "R";
  std::printf("| %s | %zu | %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %d | %d |\n", name,
              g.nodes.size(), fluidml.layouts.size(), all_row_major, fluidml.cost, refined.cost,
              exact->cost, fluidml.cost / exact->cost, choice.c_str(), fluidml.sequences,
              fluidml.conflicts);
}

}  // namespace

int main() {
  const int64_t tokens = 128;
  // Costs are measured once per distinct (shape, layouts) and looked up by the planner.
  std::map<std::vector<int64_t>, double> measured;
  auto mm_cost = [&](const MatmulNode& s, int in, int out) {
    std::vector<int64_t> key{0, s.m, s.k, s.n, in, out};
    auto it = measured.find(key);
    if (it == measured.end()) it = measured.emplace(key, matmul_ms(s.m, s.k, s.n, in, out)).first;
    return it->second;
  };
  auto add_cost = [&](int64_t m, int64_t n, int a, int b, int out) {
    std::vector<int64_t> key{1, m, n, a, b, out};
    auto it = measured.find(key);
    if (it == measured.end()) it = measured.emplace(key, add_ms(m, n, a, b, out)).first;
    return it->second;
  };
  std::printf(
      "| graph | nodes | tensors | all row-major ms | FluidML plan ms | refined ms | brute force "
      "(optimum) ms | FluidML / optimum | FluidML layouts (R/C per tensor) | sequences | "
      "conflicts |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  {
    const std::vector<MatmulNode> shapes{
        {tokens, 256, 1024}, {tokens, 1024, 64}, {tokens, 64, 768}, {tokens, 768, 256}};
    layout::LayoutGraph g;
    int previous = g.add_edge("x", 2);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int next = g.add_edge("t" + std::to_string(i), 2);
      g.add_node("mm" + std::to_string(i), {previous}, {next});
      previous = next;
    }
    g.cost = [&](int v, const std::vector<int>& in, const std::vector<int>& out) {
      return mm_cost(shapes[v], in[0], out[0]);
    };
    report("linear", g);
  }
  {
    // x -> mm0 -> a; a -> mm1 -> b -> mm2 -> c; a -> mm3 -> d; add(c, d) -> e -> mm4 -> y.
    const std::vector<MatmulNode> shapes{{tokens, 256, 512},
                                         {tokens, 512, 64},
                                         {tokens, 64, 384},
                                         {tokens, 512, 384},
                                         {tokens, 384, 256}};
    layout::LayoutGraph g;
    const int x = g.add_edge("x", 2), a = g.add_edge("a", 2), b = g.add_edge("b", 2),
              c = g.add_edge("c", 2), d = g.add_edge("d", 2), e = g.add_edge("e", 2),
              y = g.add_edge("y", 2);
    g.add_node("mm0", {x}, {a});
    g.add_node("mm1", {a}, {b});
    g.add_node("mm2", {b}, {c});
    g.add_node("mm3", {a}, {d});
    g.add_node("add", {c, d}, {e});
    g.add_node("mm4", {e}, {y});
    const int matmul_of[] = {0, 1, 2, 3, -1, 4};
    g.cost = [&](int v, const std::vector<int>& in, const std::vector<int>& out) {
      if (matmul_of[v] < 0) return add_cost(tokens, 384, in[0], in[1], out[0]);
      return mm_cost(shapes[matmul_of[v]], in[0], out[0]);
    };
    report("branched", g);
  }
  std::printf(
      "\nMeasured node costs (ms, fastest of 7; R = row-major, C = column-major):\n\n"
      "| node | shape | in -> out: RR | RC | CR | CC |\n|---|---|---|---|---|---|\n");
  for (const auto& [key, ms] : measured) {
    if (key[0] != 0 || key[4] != 0 || key[5] != 0) continue;
    std::printf("| matmul | %lldx%lldx%lld | %.3f | %.3f | %.3f | %.3f |\n",
                static_cast<long long>(key[1]), static_cast<long long>(key[2]),
                static_cast<long long>(key[3]), ms, measured[{0, key[1], key[2], key[3], 0, 1}],
                measured[{0, key[1], key[2], key[3], 1, 0}],
                measured[{0, key[1], key[2], key[3], 1, 1}]);
  }
  return 0;
}

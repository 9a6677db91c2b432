// Planning time against trace length (issue 19): greedy_by_size's placement by OffsetPlacer (reads
// and sorts every placed block a lifetime overlaps) and by OccupancyTree (a segment tree over time
// of coalesced address ranges), 1k to 1M allocations, on
//  * dnn_like: seeded random traces shaped like recorded CNN passes (a few dozen live at once);
//  * real traces (given as files, e.g. bench/data/idealloc/Y_1.csv.gz, thousands live at once):
//    up to the trace's length its first n allocations by start, beyond it copies of the whole
//    trace one after another in time.
// Each cell is the minimum of --repeats runs of the placement alone (the Problem is built
// outside), checked to give the same offsets both ways; a placer whose previous length took over
// --skip-after seconds is not run at larger ones. Prints a markdown table, and CSV with --csv.
//   build/bench/planner_scaling bench/data/idealloc/Y_1.csv.gz --csv scaling.csv
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/problem.h"
#include "memoplan/trace_io.h"
#include "occupancy_tree.h"
#include "offset_placer.h"
#include "random_traces.h"

namespace {

using memoplan::Trace;
using memoplan::planner::Problem;

// The first n allocations by start, or copies of the whole trace laid end to end in time.
Trace scaled_trace(const Trace& real, size_t n) {
  Trace out;
  out.meta.name = real.meta.name + "@" + std::to_string(n);
  std::vector<size_t> by_begin(real.allocations.size());
  std::iota(by_begin.begin(), by_begin.end(), size_t{0});
  std::stable_sort(by_begin.begin(), by_begin.end(), [&](size_t a, size_t b) {
    return real.allocations[a].begin < real.allocations[b].begin;
  });
  uint64_t span = 0;
  for (const memoplan::Allocation& a : real.allocations) span = std::max(span, a.end);
  for (uint64_t copy = 0; out.allocations.size() < n; ++copy) {
    for (size_t i : by_begin) {
      if (out.allocations.size() == n) break;
      memoplan::Allocation a = real.allocations[i];
      a.id = out.allocations.size();
      a.begin += copy * (span + 1);
      a.end += copy * (span + 1);
      out.allocations.push_back(a);
    }
  }
  return out;
}

template <typename Place>
double best_ms(int repeats, std::vector<uint64_t>& offsets, Place place) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    offsets = place();
    best = std::min(
        best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  std::string csv;
  int repeats = 3;
  double skip_after_s = 20;
  bool tree_only = false;  // OffsetPlacer not run at all
  std::vector<size_t> lengths = {1000, 4000, 16000, 64000, 256000, 1000000};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--csv" && i + 1 < argc) {
      csv = argv[++i];
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--tree-only") {
      tree_only = true;
    } else if (arg == "--skip-after" && i + 1 < argc) {
      skip_after_s = std::atof(argv[++i]);
    } else if (arg == "--max" && i + 1 < argc) {
      const size_t max = std::strtoull(argv[++i], nullptr, 10);
      lengths.erase(
          std::remove_if(lengths.begin(), lengths.end(), [max](size_t n) { return n > max; }),
          lengths.end());
    } else if (!arg.empty() && arg[0] != '-') {
      files.push_back(arg);
    } else {
      std::fprintf(stderr,
                   "usage: %s [TRACE ...] [--csv FILE] [--repeats 3] [--skip-after 20] "
                   "[--max N] [--tree-only]\n",
                   argv[0]);
      return 2;
    }
  }
  struct Source {
    std::string name;
    Trace trace;  // empty: random dnn_like
  };
  std::vector<Source> sources = {{"dnn_like", {}}};
  for (const std::string& file : files) {
    auto trace = memoplan::read_trace(file);
    if (!trace) {
      std::fprintf(stderr, "%s\n", trace.error().c_str());
      return 1;
    }
    std::string name = file.substr(file.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
    sources.push_back({name, std::move(*trace)});
  }

  FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) std::fprintf(out, "trace,allocations,most_live,placer,ms,slab_over_lower_bound\n");
  std::printf(
      "| trace | allocations | most live at once | OffsetPlacer ms | OccupancyTree ms | "
      "greedy_by_size / lower bound |\n|---|---|---|---|---|---|\n");
  int mismatches = 0;
  for (const Source& source : sources) {
    bool list_on = !tree_only, tree_on = true;
    for (size_t n : lengths) {
      const Trace trace =
          source.trace.allocations.empty()
              ? memoplan::testing::random_trace(memoplan::testing::TraceShape::kDnnLike, n, 42)
              : scaled_trace(source.trace, n);
      auto problem = memoplan::planner::make_problem(trace);
      if (!problem) {
        std::fprintf(stderr, "%s\n", problem.error().c_str());
        return 1;
      }
      const auto order = memoplan::planner::order_by_size_desc(*problem);
      const auto fit = memoplan::planner::Fit::kBest;
      std::vector<uint64_t> by_list, by_tree;
      double list_ms = -1, tree_ms = -1;
      if (list_on) {
        list_ms = best_ms(repeats, by_list, [&] {
          memoplan::planner::OffsetPlacer placer(*problem);
          for (size_t index : order) placer.place(index, fit);
          return placer.take_offsets();
        });
        list_on = list_ms < skip_after_s * 1000;
      }
      if (tree_on) {
        tree_ms = best_ms(repeats, by_tree, [&] {
          return memoplan::planner::place_in_order_by_tree(*problem, order, fit);
        });
        tree_on = tree_ms < skip_after_s * 1000;
      }
      if (!by_list.empty() && !by_tree.empty() && by_list != by_tree) ++mismatches;
      const std::vector<uint64_t>& offsets = by_tree.empty() ? by_list : by_tree;
      const double ratio =
          offsets.empty()
              ? 0.0
              : static_cast<double>(memoplan::planner::slab_size(*problem, offsets)) /
                    static_cast<double>(memoplan::planner::offset_lower_bound(*problem));
      const size_t live = memoplan::planner::most_live_at_once(*problem);
      auto cell = [](double ms) {
        char text[32];
        if (ms < 0) return std::string("(skipped)");
        std::snprintf(text, sizeof text, "%.1f", ms);
        return std::string(text);
      };
      std::printf("| %s | %zu | %zu | %s | %s | %.4f |\n", source.name.c_str(), n, live,
                  cell(list_ms).c_str(), cell(tree_ms).c_str(), ratio);
      std::fflush(stdout);
      if (out) {
        if (list_ms >= 0) {
          std::fprintf(out, "%s,%zu,%zu,OffsetPlacer,%.3f,%.6f\n", source.name.c_str(), n, live,
                       list_ms, ratio);
        }
        if (tree_ms >= 0) {
          std::fprintf(out, "%s,%zu,%zu,OccupancyTree,%.3f,%.6f\n", source.name.c_str(), n, live,
                       tree_ms, ratio);
        }
      }
    }
  }
  if (out) std::fclose(out);
  if (mismatches) std::printf("MISMATCH: the two placers differed on %d traces\n", mismatches);
  return mismatches ? 1 : 0;
}

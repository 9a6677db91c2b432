// `memoplan compare TRACE...`: every strategy on every trace, like Pisarchyk & Lee's Table 2.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "cli_common.h"
#include "memoplan/planner/planner.h"
#include "memoplan/trace_io.h"

namespace memoplan::cli {
namespace {

struct CompareArgs {
  std::vector<std::string> traces;
  std::vector<std::string> strategies;  // empty: all
  double time_limit_s = 1.0;
  bool csv = false;
  bool markdown = false;
  bool by_trace = false;  // one row per trace instead of one per strategy
  bool as_json = false;
};

struct Cell {
  bool ok = false;
  std::string error;
  Plan plan;
};

// A trace's lower bound (0 when no strategy planned it) and its smallest slab (UINT64_MAX: none).
std::pair<uint64_t, uint64_t> bound_and_smallest(const std::vector<Cell>& cells) {
  uint64_t bound = 0, smallest = UINT64_MAX;
  for (const Cell& c : cells) {
    if (!c.ok) continue;
    bound = c.plan.lower_bound_bytes;
    smallest = std::min(smallest, c.plan.slab_bytes);
  }
  return {bound, smallest};
}

std::string trace_label(const Trace& trace, const std::string& path) {
  if (!trace.meta.name.empty()) return trace.meta.name;
  std::string name = path.substr(path.find_last_of('/') + 1);
  return name.substr(0, name.find('.'));
}

// The trace files named: a folder stands for every trace file in it (.json, .csv, optionally
// .gz), in name order.
Result<std::vector<std::string>> expand_folders(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& path : paths) {
    std::error_code error;
    if (!fs::is_directory(path, error)) {
      out.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
      const std::string name = entry.path().filename().string();
      auto ends = [&](const char* suffix) {
        const std::string s(suffix);
        return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
      };
      if (entry.is_regular_file() &&
          (ends(".json") || ends(".json.gz") || ends(".csv") || ends(".csv.gz"))) {
        found.push_back(entry.path().string());
      }
    }
    if (error) return Error{path + ": " + error.message()};
    if (found.empty()) return Error{path + ": a folder with no trace files (.json, .csv, .gz)"};
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    std::stringstream stream(item);
    for (std::string part; std::getline(stream, part, ',');) {
      if (!part.empty()) out.push_back(part);
    }
  }
  return out;
}

void print_csv(const std::vector<std::string>& labels, const std::vector<std::string>& strategies,
               const std::vector<std::vector<Cell>>& cells) {
  fmt::print("trace,strategy,status,slab_bytes,lower_bound_bytes,ratio,planning_ms,error\n");
  for (size_t t = 0; t < labels.size(); ++t) {
    for (size_t s = 0; s < strategies.size(); ++s) {
      const Cell& c = cells[t][s];
      if (!c.ok) {
        fmt::print("{},{},error,,,,,\"{}\"\n", labels[t], strategies[s], c.error);
        continue;
      }
      fmt::print("{},{},{},{},{},{:.6f},{:.3f},\n", labels[t], strategies[s],
                 to_string(c.plan.status), c.plan.slab_bytes, c.plan.lower_bound_bytes,
                 c.plan.ratio_to_lower_bound(), c.plan.planning_ms);
    }
  }
}

// Rows: strategies; columns: traces; a cell: "ratio to the lower bound (planning ms)".
void print_table(const std::vector<std::string>& labels, const std::vector<std::string>& strategies,
                 const std::vector<std::vector<Cell>>& cells, bool markdown) {
  const std::string sep = markdown ? " | " : "  ";
  const size_t name_width = 30, cell_width = 18;
  auto row = [&](const std::string& head, const std::vector<std::string>& values) {
    std::string line = markdown ? "| " : "";
    line += fmt::format("{:<{}}", head, markdown ? 0 : name_width);
    for (const std::string& v : values) line += sep + fmt::format("{:>{}}", v, cell_width);
    fmt::print("{}{}\n", line, markdown ? " |" : "");
  };
  row("strategy", labels);
  if (markdown) {
    std::string line = "|---";
    for (size_t i = 0; i < labels.size(); ++i) line += "|---:";
    fmt::print("{}|\n", line);
  }
  std::vector<std::string> bounds, best;
  for (size_t t = 0; t < labels.size(); ++t) {
    const auto [bound, smallest] = bound_and_smallest(cells[t]);
    bounds.push_back(format_bytes(bound));
    best.push_back(smallest == UINT64_MAX ? "-" : format_bytes(smallest));
  }
  row("lower bound", bounds);
  row("smallest slab", best);
  for (size_t s = 0; s < strategies.size(); ++s) {
    std::vector<std::string> values;
    for (size_t t = 0; t < labels.size(); ++t) {
      const Cell& c = cells[t][s];
      values.push_back(c.ok ? fmt::format("{:.3f} ({:.1f} ms)", c.plan.ratio_to_lower_bound(),
                                          c.plan.planning_ms)
                            : std::string("error"));
    }
    row(strategies[s], values);
  }
  if (!markdown) fmt::print("\ncells: slab / lower bound (planning time)\n");
}

// Rows: traces (allocations, lower bound); a column per strategy: "slab bytes, ratio, ms", `*`
// after the ratio when proven optimal. The layout of MiniMalloc's and TelaMalloc's tables.
void print_by_trace(const std::vector<std::string>& labels, const std::vector<size_t>& rows,
                    const std::vector<std::string>& strategies,
                    const std::vector<std::vector<Cell>>& cells, bool markdown) {
  const std::string sep = markdown ? " | " : "  ";
  std::string head =
      markdown ? "| trace | allocations | lower bound B" : "trace  allocations  lower bound B";
  for (const std::string& s : strategies) head += sep + s + ": slab B, ratio, ms";
  fmt::print("{}{}\n", head, markdown ? " |" : "");
  if (markdown) {
    std::string line = "|---|---:|---:";
    for (size_t i = 0; i < strategies.size(); ++i) line += "|---:";
    fmt::print("{}|\n", line);
  }
  for (size_t t = 0; t < labels.size(); ++t) {
    uint64_t bound = 0;
    for (const Cell& c : cells[t]) {
      if (c.ok) bound = c.plan.lower_bound_bytes;
    }
    std::string line = (markdown ? "| " : "") + labels[t] + sep + std::to_string(rows[t]) + sep +
                       std::to_string(bound);
    for (const Cell& c : cells[t]) {
      line += sep + (c.ok ? fmt::format("{}, {:.4f}{}, {:.1f}", c.plan.slab_bytes,
                                        c.plan.ratio_to_lower_bound(),
                                        c.plan.status == SolveStatus::kOptimal ? "*" : "",
                                        c.plan.planning_ms)
                          : std::string("error"));
    }
    fmt::print("{}{}\n", line, markdown ? " |" : "");
  }
  if (!markdown)
    fmt::print("\ncells: slab bytes, slab / lower bound (* proven optimal), planning ms\n");
}

// One object: `traces` (per trace: its lower bound and the strategy with the smallest slab) and
// `rows` (per trace and strategy, in the order of the tables).
void print_json(const std::vector<std::string>& paths, const std::vector<std::string>& labels,
                const std::vector<size_t>& rows, const std::vector<std::string>& strategies,
                const std::vector<std::vector<Cell>>& cells, double time_limit_s) {
  nlohmann::json traces = nlohmann::json::array(), out_rows = nlohmann::json::array();
  for (size_t t = 0; t < labels.size(); ++t) {
    const auto [bound, smallest] = bound_and_smallest(cells[t]);
    nlohmann::json best = nlohmann::json::array();
    for (size_t s = 0; s < strategies.size(); ++s) {
      const Cell& c = cells[t][s];
      if (c.ok && c.plan.slab_bytes == smallest) best.push_back(strategies[s]);
      nlohmann::json row = {{"trace", labels[t]},
                            {"path", paths[t]},
                            {"strategy", strategies[s]},
                            {"status", c.ok ? to_string(c.plan.status) : "error"},
                            {"valid", c.ok},
                            {"error", c.ok ? nlohmann::json(nullptr) : nlohmann::json(c.error)}};
      if (c.ok) {
        row["slab_bytes"] = c.plan.slab_bytes;
        row["lower_bound_bytes"] = c.plan.lower_bound_bytes;
        row["ratio"] = c.plan.ratio_to_lower_bound();
        row["planning_ms"] = c.plan.planning_ms;
        row["optimal"] = c.plan.status == SolveStatus::kOptimal;
        row["note"] = c.plan.note;
      } else {
        for (const char* key : {"slab_bytes", "lower_bound_bytes", "ratio", "planning_ms"}) {
          row[key] = nullptr;
        }
        row["optimal"] = false;
        row["note"] = "";
      }
      out_rows.push_back(std::move(row));
    }
    const bool any = smallest != UINT64_MAX;
    traces.push_back(
        {{"trace", labels[t]},
         {"path", paths[t]},
         {"allocations", rows[t]},
         {"lower_bound_bytes", any ? nlohmann::json(bound) : nlohmann::json(nullptr)},
         {"best_strategy", any ? nlohmann::json(best.front()) : nlohmann::json(nullptr)},
         {"best_slab_bytes", any ? nlohmann::json(smallest) : nlohmann::json(nullptr)},
         {"best_strategies", best}});
  }
  const nlohmann::json out = {{"strategies", strategies},
                              {"time_limit_s", time_limit_s},
                              {"traces", traces},
                              {"rows", out_rows}};
  fmt::print("{}\n", out.dump());
}

int run_compare(const CompareArgs& args) {
  std::vector<std::string> strategies = split_commas(args.strategies);
  if (strategies.empty()) {
    for (const planner::StrategyInfo& s : planner::all_strategies()) strategies.push_back(s.name);
  }
  for (const std::string& name : strategies) {
    if (!planner::find_strategy(name)) {
      return fail("unknown strategy '" + name + "' (known: " + planner::strategy_names() + ")");
    }
  }
  Result<std::vector<std::string>> paths = expand_folders(args.traces);
  if (!paths) return fail(paths.error());
  std::vector<std::string> labels;
  std::vector<size_t> rows;
  std::vector<std::vector<Cell>> cells;
  int exit_code = 0;
  for (const std::string& path : *paths) {
    Result<Trace> trace = read_trace(path);
    if (!trace) return fail(trace.error());
    labels.push_back(trace_label(*trace, path));
    rows.push_back(trace->allocations.size());
    cells.emplace_back();
    for (const std::string& name : strategies) {
      PlanOptions options;
      options.strategy = name;
      options.strategy_options.time_limit_s = args.time_limit_s;
      Result<Plan> plan = plan_trace(*trace, options);
      Cell cell;
      cell.ok = plan.ok();
      if (plan) {
        cell.plan = std::move(plan).value();
      } else {
        cell.error = plan.error();
        fmt::print(stderr, "memoplan: {}: {}: {}\n", path, name, cell.error);
        exit_code = kExitInvalidPlan;
      }
      cells.back().push_back(std::move(cell));
    }
  }
  if (args.as_json) {
    print_json(*paths, labels, rows, strategies, cells, args.time_limit_s);
  } else if (args.csv) {
    print_csv(labels, strategies, cells);
  } else if (args.by_trace) {
    print_by_trace(labels, rows, strategies, cells, args.markdown);
  } else {
    print_table(labels, strategies, cells, args.markdown);
  }
  return exit_code;
}

}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("compare", "Every strategy on every trace: slab, ratio, planning time");
  auto args = std::make_shared<CompareArgs>();
  cmd->add_option("TRACE", args->traces, "Trace files, or folders of them")->required();
  cmd->add_option("-s,--strategies", args->strategies, "Comma-separated strategies (default all)");
  cmd->add_option("--time-limit", args->time_limit_s, "Seconds for mip and best, per trace")
      ->check(CLI::PositiveNumber);
  auto* csv = cmd->add_flag("--csv", args->csv, "One CSV row per trace and strategy");
  auto* markdown = cmd->add_flag("--markdown", args->markdown, "A Markdown table");
  cmd->add_flag("--by-trace", args->by_trace,
                "One row per trace (slab bytes, ratio, ms per strategy) instead of per strategy");
  cmd->add_flag("--json", args->as_json,
                "One JSON object: every trace and strategy, lower bounds, the best per trace")
      ->excludes(csv)
      ->excludes(markdown);
  cmd->callback([args, &exit_code] { exit_code = run_compare(*args); });
}

}  // namespace memoplan::cli

// `memoplan info TRACE`: what is in a trace, and how small any plan of it could be.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/problem.h"
#include "memoplan/trace_io.h"

namespace memoplan::cli {
namespace {

struct Bucket {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

int run_info(const std::string& path, bool as_json) {
  Result<Trace> trace = read_trace(path);
  if (!trace) return fail(trace.error());
  Result<planner::Problem> problem = planner::make_problem(*trace);
  if (!problem) return fail(path + ": " + problem.error());

  uint64_t zero = 0, escaping = 0, total = 0, largest = 0, ticks = 0;
  std::map<int, Bucket> histogram;  // floor(log2(size)) -> rows
  std::map<std::string, Bucket> by_op;
  for (const Allocation& a : trace->allocations) {
    ticks = std::max(ticks, effective_end(a));
    if (a.size == 0) {
      ++zero;
      continue;
    }
    escaping += a.escapes;
    total += a.size;
    largest = std::max(largest, a.size);
    int bucket = 63 - __builtin_clzll(a.size);
    histogram[bucket].count++;
    histogram[bucket].bytes += a.size;
    Bucket& op = by_op[a.provenance.op.empty() ? "(unknown)" : a.provenance.op];
    op.count++;
    op.bytes += a.size;
  }
  const uint64_t offset_bound = planner::offset_lower_bound(*problem);
  const uint64_t shared_bound = planner::shared_objects_lower_bound(*problem);
  const size_t rows = trace->allocations.size();

  if (as_json) {
    nlohmann::json out = {{"trace", path},
                          {"allocations", rows},
                          {"nonzero", rows - zero},
                          {"zero_byte", zero},
                          {"escaping", escaping},
                          {"total_bytes", total},
                          {"largest_bytes", largest},
                          {"ticks", ticks},
                          {"alignment", problem->alignment},
                          {"lower_bound_bytes", offset_bound},
                          {"shared_objects_lower_bound_bytes", shared_bound},
                          {"fingerprint", trace_fingerprint(*trace)}};
    fmt::print("{}\n", out.dump());
    return 0;
  }
  const TraceMeta& m = trace->meta;
  fmt::print("trace        {}\n", path);
  if (!m.name.empty()) fmt::print("name         {}\n", m.name);
  if (!m.input_shapes.empty()) fmt::print("input        {}\n", m.input_shapes);
  if (!m.source.empty()) fmt::print("source       {}\n", m.source);
  if (m.threads) fmt::print("threads      {}\n", m.threads);
  fmt::print("fingerprint  {}\n", trace_fingerprint(*trace));
  fmt::print("allocations  {} ({} zero-byte, {} escaping the pass)\n", rows, zero, escaping);
  fmt::print("total bytes  {} (largest {})\n", format_bytes(total), format_bytes(largest));
  fmt::print("event clock  {} ticks, plan alignment {} B\n", ticks, problem->alignment);
  fmt::print(
      "lower bound  {} offsets (max live bytes), {} shared objects (sum of positional "
      "maxima)\n",
      format_bytes(offset_bound), format_bytes(shared_bound));
  fmt::print("reuse        {:.1f}x: a naive plan needs total/bound of the memory\n\n",
             offset_bound ? static_cast<double>(total) / offset_bound : 0.0);

  fmt::print("{:>22}  {:>8}  {:>10}\n", "size", "count", "bytes");
  for (const auto& [log2, bucket] : histogram) {
    const std::string range =
        format_bytes(uint64_t{1} << log2) + " .. " + format_bytes((uint64_t{2} << log2) - 1);
    fmt::print("{:>22}  {:>8}  {:>10}\n", range, bucket.count, format_bytes(bucket.bytes));
  }

  std::vector<std::pair<std::string, Bucket>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  fmt::print("\n{:<40}  {:>8}  {:>10}\n", "op (top 10 by bytes)", "count", "bytes");
  for (size_t i = 0; i < ops.size() && i < 10; ++i) {
    fmt::print("{:<40}  {:>8}  {:>10}\n", ops[i].first.substr(0, 40), ops[i].second.count,
               format_bytes(ops[i].second.bytes));
  }
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("info", "Counts, sizes, live bytes and lower bounds of a trace");
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("TRACE", *path, "Trace file (JSON, JSON.gz or CSV)")->required();
  cmd->add_flag("--json", *as_json, "One JSON object instead of the report");
  cmd->callback([=, &exit_code] { exit_code = run_info(*path, *as_json); });
}

}  // namespace memoplan::cli

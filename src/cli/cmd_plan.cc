// `memoplan plan` and `memoplan validate`.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "memoplan/trace_io.h"

namespace memoplan::cli {
namespace {

struct PlanArgs {
  std::string trace;
  std::string output;
  std::string strategy{planner::kDefaultStrategy};
  double time_limit_s = PlanOptions{}.strategy_options.time_limit_s;
  uint64_t seed = 1;
  uint64_t capacity = 0;          // 0: minimize
  std::string memory = "offset";  // "min": take the trace's aliasing claims
  bool as_json = false;
  bool list = false;
};

void list_strategies() {
  for (const planner::StrategyInfo& s : planner::all_strategies()) {
    fmt::print("{:<32} {}{}\n{:<32} ({})\n", s.name, s.summary,
               s.name == planner::kDefaultStrategy ? " [default]" : "", "", s.reference);
  }
}

int run_plan(const PlanArgs& args) {
  if (args.list) {
    list_strategies();
    return 0;
  }
  if (args.trace.empty()) return fail("plan: a TRACE is required (or --list)");
  Result<Trace> trace = read_trace(args.trace);
  if (!trace) return fail(trace.error());
  PlanOptions options;
  options.strategy = args.strategy;
  options.strategy_options.time_limit_s = args.time_limit_s;
  options.strategy_options.seed = args.seed;
  options.strategy_options.capacity = args.capacity;
  options.aliases = args.memory == "min";
  Result<Plan> plan = plan_trace(*trace, options);
  if (!plan) return fail(args.trace + ": " + plan.error());
  // plan_trace refuses invalid plans; validating again here is what `valid` in --json reports.
  const ValidationReport report = validate_plan(*trace, *plan);

  if (!args.output.empty()) {
    if (std::string error = write_plan(*plan, args.output); !error.empty()) return fail(error);
  }
  if (args.as_json) {
    nlohmann::json out = {{"trace", args.trace},
                          {"strategy", plan->strategy},
                          {"status", to_string(plan->status)},
                          {"slab_bytes", plan->slab_bytes},
                          {"lower_bound_bytes", plan->lower_bound_bytes},
                          {"offset_lower_bound_bytes", plan->offset_lower_bound_bytes},
                          {"aliased_rows", plan->aliased_rows},
                          {"memory", args.memory},
                          {"ratio", plan->ratio_to_lower_bound()},
                          {"planning_ms", plan->planning_ms},
                          {"valid", report.valid},
                          {"allocations", trace->allocations.size()},
                          {"note", plan->note},
                          {"output", args.output}};
    if (args.capacity) {
      out["capacity"] = args.capacity;
      out["fits_capacity"] = plan->slab_bytes <= args.capacity;
    }
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{}: {} allocations, strategy {} ({})\n", args.trace, trace->allocations.size(),
               plan->strategy, to_string(plan->status));
    fmt::print("slab {} ({} B), lower bound {} ({} B), ratio {:.4f}, planned in {:.2f} ms\n",
               format_bytes(plan->slab_bytes), plan->slab_bytes,
               format_bytes(plan->lower_bound_bytes), plan->lower_bound_bytes,
               plan->ratio_to_lower_bound(), plan->planning_ms);
    if (plan->offset_lower_bound_bytes != plan->lower_bound_bytes || plan->aliased_rows) {
      fmt::print("without sharing: offset lower bound {} ({} B); {} rows share bytes\n",
                 format_bytes(plan->offset_lower_bound_bytes), plan->offset_lower_bound_bytes,
                 plan->aliased_rows);
    }
    if (!plan->note.empty()) fmt::print("note: {}\n", plan->note);
    fmt::print("validation: {}\n", report.valid ? "ok" : "FAILED");
    if (!args.output.empty()) fmt::print("wrote {}\n", args.output);
  }
  if (!report.valid) return kExitInvalidPlan;
  if (args.capacity && plan->slab_bytes > args.capacity) {
    fmt::print(stderr,
               "memoplan: error: {}: no plan within --capacity {} bytes found; the best found "
               "takes {} bytes ({})\n",
               args.trace, args.capacity, plan->slab_bytes, plan->note);
    return kExitOverCapacity;
  }
  return 0;
}

int run_validate(const std::string& trace_path, const std::string& plan_path, bool as_json) {
  Result<Trace> trace = read_trace(trace_path);
  if (!trace) return fail(trace.error());
  Result<Plan> plan = read_plan(plan_path);
  if (!plan) return fail(plan.error());
  const std::string fingerprint = trace_fingerprint(*trace);
  if (!plan->trace_fingerprint.empty() && plan->trace_fingerprint != fingerprint) {
    fmt::print(stderr,
               "memoplan: {} was made for a trace with fingerprint {}, {} has {}; validating "
               "anyway\n",
               plan_path, plan->trace_fingerprint, trace_path, fingerprint);
  }
  const ValidationReport report = validate_plan(*trace, *plan);
  if (as_json) {
    size_t checked = 0;  // the rows validate_plan places in the slab: not zero-byte, not escaping
    for (const Allocation& a : trace->allocations) checked += a.size != 0 && !a.escapes;
    const nlohmann::json out = {
        {"trace", trace_path},
        {"plan", plan_path},
        {"valid", report.valid},
        {"error", report.valid || report.messages.empty()
                      ? nlohmann::json(nullptr)
                      : nlohmann::json(report.messages.front())},
        {"violations", report.violations},
        {"messages", report.messages},
        {"strategy", plan->strategy},
        {"slab_bytes", plan->slab_bytes},
        {"offsets", plan->offsets.size()},
        {"allocations", trace->allocations.size()},
        {"checked", checked},
        {"fingerprint_matches",
         plan->trace_fingerprint.empty() || plan->trace_fingerprint == fingerprint}};
    fmt::print("{}\n", out.dump());
    return report.valid ? 0 : kExitInvalidPlan;
  }
  if (report.valid) {
    fmt::print("{}: valid for {} (slab {}, {} allocations)\n", plan_path, trace_path,
               format_bytes(plan->slab_bytes), trace->allocations.size());
    return 0;
  }
  fmt::print("{}: INVALID for {}: {} violation(s)\n", plan_path, trace_path, report.violations);
  for (const std::string& message : report.messages) fmt::print("  {}\n", message);
  if (report.violations > report.messages.size()) {
    fmt::print("  ... and {} more\n", report.violations - report.messages.size());
  }
  return kExitInvalidPlan;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("plan", "Plan a trace into one slab and validate the plan");
  auto args = std::make_shared<PlanArgs>();
  cmd->add_option("TRACE", args->trace, "Trace file (JSON, JSON.gz or CSV)");
  cmd->add_option("-s,--strategy", args->strategy, "Strategy (see --list)");
  cmd->add_option("-o,--output", args->output, "Write the plan here (JSON; .gz compresses)");
  cmd->add_option("--time-limit", args->time_limit_s,
                  "Seconds for searching strategies (mip, exact, best)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "Seed for randomized search");
  auto* capacity =
      cmd->add_option("--capacity", args->capacity,
                      "Bytes the slab may take: `exact` searches for a plan within them instead "
                      "of the smallest; any plan over them exits with code 3")
          ->check(CLI::PositiveNumber);
  cmd->add_flag("--minimize", "Search for the smallest slab (the default without --capacity)")
      ->excludes(capacity);
  cmd->add_option("--memory", args->memory,
                  "offset: every allocation gets bytes of its own; min: allocations the trace "
                  "says may share bytes (alias_of, slice_of) do, below the offset lower bound")
      ->check(CLI::IsMember({"offset", "min"}));
  cmd->add_flag("--json", args->as_json, "Print one JSON object");
  cmd->add_flag("--list", args->list, "List the strategies");
  cmd->callback([args, &exit_code] { exit_code = run_plan(*args); });
}

void add_validate_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("validate", "Check a plan against its trace independently");
  auto trace = std::make_shared<std::string>();
  auto plan = std::make_shared<std::string>();
  cmd->add_option("TRACE", *trace, "Trace file")->required();
  cmd->add_option("PLAN", *plan, "Plan file")->required();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *as_json, "One JSON object instead of the report");
  cmd->callback([=, &exit_code] { exit_code = run_validate(*trace, *plan, *as_json); });
}

}  // namespace memoplan::cli

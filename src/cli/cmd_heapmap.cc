// `memoplan heapmap TRACE [PLAN] -o FILE.svg`: draw a plan (planned on the spot when no PLAN).
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "memoplan/heapmap.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "memoplan/trace_io.h"

namespace memoplan::cli {
namespace {

struct HeapmapArgs {
  std::string trace;
  std::string plan;
  std::string output;
  std::string strategy{planner::kDefaultStrategy};
  int width = 1600;
  int height = 900;
  bool as_json = false;
};

int run_heapmap(const HeapmapArgs& args) {
  Result<Trace> trace = read_trace(args.trace);
  if (!trace) return fail(trace.error());
  Result<Plan> plan = Error{""};
  if (args.plan.empty()) {
    PlanOptions options;
    options.strategy = args.strategy;
    plan = plan_trace(*trace, options);
    if (!plan) return fail(args.trace + ": " + plan.error());
  } else {
    plan = read_plan(args.plan);
    if (!plan) return fail(plan.error());
    const ValidationReport report = validate_plan(*trace, *plan, 1);
    if (!report.valid) {
      return fail(args.plan + " does not fit " + args.trace + ": " + report.messages.front());
    }
  }
  HeapmapOptions options;
  options.width = args.width;
  options.height = args.height;
  const std::string svg = render_heapmap_svg(*trace, *plan, options);
  if (std::string error = write_file_text(args.output, svg); !error.empty()) return fail(error);
  if (args.as_json) {
    const nlohmann::json out = {{"output", args.output},
                                {"trace", args.trace},
                                {"plan", args.plan},
                                {"strategy", plan->strategy},
                                {"status", to_string(plan->status)},
                                {"slab_bytes", plan->slab_bytes},
                                {"lower_bound_bytes", plan->lower_bound_bytes},
                                {"allocations", trace->allocations.size()},
                                {"width", args.width},
                                {"height", args.height}};
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("wrote {} ({} allocations, slab {}, lower bound {})\n", args.output,
             trace->allocations.size(), format_bytes(plan->slab_bytes),
             format_bytes(plan->lower_bound_bytes));
  return 0;
}

}  // namespace

void add_heapmap_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("heapmap", "Draw a plan as SVG: time on x, address on y");
  auto args = std::make_shared<HeapmapArgs>();
  cmd->add_option("TRACE", args->trace, "Trace file")->required();
  cmd->add_option("PLAN", args->plan, "Plan file (default: plan now with --strategy)");
  cmd->add_option("-o,--output", args->output, "SVG file to write")->required();
  cmd->add_option("-s,--strategy", args->strategy, "Strategy when no PLAN is given");
  cmd->add_option("--width", args->width, "Picture width in px")->check(CLI::Range(200, 20000));
  cmd->add_option("--height", args->height, "Picture height in px")->check(CLI::Range(150, 20000));
  cmd->add_flag("--json", args->as_json, "One JSON object instead of the line");
  cmd->callback([args, &exit_code] { exit_code = run_heapmap(*args); });
}

}  // namespace memoplan::cli

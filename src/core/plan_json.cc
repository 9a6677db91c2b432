// The memoplan-plan JSON format (docs/FORMATS.md).
#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "memoplan/trace_io.h"

namespace memoplan {
namespace {

using nlohmann::json;
constexpr int kPlanVersion = 1;
constexpr const char* kPlanFormat = "memoplan-plan";

std::optional<SolveStatus> status_from_string(const std::string& text) {
  for (SolveStatus s : {SolveStatus::kHeuristic, SolveStatus::kOptimal, SolveStatus::kFeasible,
                        SolveStatus::kTimedOut}) {
    if (text == to_string(s)) return s;
  }
  return std::nullopt;
}

}  // namespace

std::string plan_to_json(const Plan& plan, int indent) {
  json root = {{"format", kPlanFormat},
               {"version", kPlanVersion},
               {"strategy", plan.strategy},
               {"status", to_string(plan.status)},
               {"slab_bytes", plan.slab_bytes},
               {"alignment", plan.alignment},
               {"lower_bound_bytes", plan.lower_bound_bytes},
               {"offset_lower_bound_bytes", plan.offset_lower_bound_bytes},
               {"aliased_rows", plan.aliased_rows},
               {"planning_ms", plan.planning_ms},
               {"trace_fingerprint", plan.trace_fingerprint},
               {"note", plan.note},
               {"offsets", plan.offsets}};
  return root.dump(indent);
}

std::string write_plan(const Plan& plan, const std::string& path) {
  return write_file_text(path, plan_to_json(plan) + "\n");
}

Result<Plan> parse_plan_json(const std::string& text, const std::string& origin) {
  std::string error;
  std::optional<json> root = json_fields::parse(text, origin, error);
  if (!root) return Error{error};
  if (std::string bad = json_fields::check_header(*root, origin, kPlanFormat, kPlanVersion);
      !bad.empty()) {
    return Error{bad};
  }
  Plan plan;
  plan.strategy = json_fields::string_field(*root, "strategy", origin, error);
  plan.trace_fingerprint = json_fields::string_field(*root, "trace_fingerprint", origin, error);
  plan.note = json_fields::string_field(*root, "note", origin, error);
  const std::string status = json_fields::string_field(*root, "status", origin, error);
  for (const char* required : {"slab_bytes", "alignment", "offsets"}) {
    if (!root->contains(required)) return Error{origin + ": missing \"" + required + "\""};
  }
  plan.slab_bytes = json_fields::u64_field(*root, "slab_bytes", 0, origin, error);
  plan.alignment = json_fields::u64_field(*root, "alignment", 64, origin, error);
  plan.lower_bound_bytes = json_fields::u64_field(*root, "lower_bound_bytes", 0, origin, error);
  // Plans written before aliasing have one bound: today's.
  plan.offset_lower_bound_bytes = json_fields::u64_field(*root, "offset_lower_bound_bytes",
                                                         plan.lower_bound_bytes, origin, error);
  plan.aliased_rows = json_fields::u64_field(*root, "aliased_rows", 0, origin, error);
  if (auto ms = root->find("planning_ms"); ms != root->end()) {
    if (!ms->is_number()) return Error{origin + ": \"planning_ms\" must be a number"};
    plan.planning_ms = ms->get<double>();
  }
  if (!error.empty()) return Error{error};
  if (plan.alignment == 0 || (plan.alignment & (plan.alignment - 1))) {
    return Error{origin + ": alignment " + std::to_string(plan.alignment) +
                 " is not a power of two"};
  }
  if (!status.empty()) {
    std::optional<SolveStatus> parsed = status_from_string(status);
    if (!parsed) return Error{origin + ": unknown status \"" + status + "\""};
    plan.status = *parsed;
  }
  const json& offsets = (*root)["offsets"];
  if (!offsets.is_array()) return Error{origin + ": \"offsets\" must be an array"};
  plan.offsets.resize(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (!json_fields::get_u64(offsets[i], plan.offsets[i])) {
      return Error{origin + ": offsets[" + std::to_string(i) +
                   "] must be a non-negative integer, got " + offsets[i].dump()};
    }
  }
  return plan;
}

Result<Plan> read_plan(const std::string& path) {
  Result<std::string> text = read_file_text(path);
  if (!text) return Error{text.error()};
  return parse_plan_json(*text, path);
}

}  // namespace memoplan

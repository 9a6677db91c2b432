// Reading and writing traces and plans (formats in docs/FORMATS.md). Every reader reports a
// malformed, truncated or wrong-version file as "PATH: what is wrong" and never throws.
#pragma once

#include <string>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/result.h"
#include "memoplan/planner/trace.h"

namespace memoplan {

// A trace from a memoplan JSON file (optionally gzip-compressed) or, when the path ends in .csv
// (or .csv.gz), from a CSV with a header row and columns size,begin,end[,id,align,name].
Result<Trace> read_trace(const std::string& path);
// Parses in-memory text as read_trace does; `origin` names it in error messages.
Result<Trace> parse_trace_json(const std::string& text, const std::string& origin);
Result<Trace> parse_trace_csv(const std::string& text, const std::string& origin);

// Writes JSON; gzip-compressed when the path ends in .gz. Returns an error message or "".
std::string write_trace(const Trace& trace, const std::string& path);

Result<Plan> read_plan(const std::string& path);
Result<Plan> parse_plan_json(const std::string& text, const std::string& origin);
std::string write_plan(const Plan& plan, const std::string& path);
std::string plan_to_json(const Plan& plan, int indent = -1);

// Reads a whole file, inflating it when it starts with the gzip magic bytes.
Result<std::string> read_file_text(const std::string& path);
// Writes a whole file, gzip-compressed when the path ends in .gz. Returns an error message or "".
std::string write_file_text(const std::string& path, const std::string& text);

}  // namespace memoplan

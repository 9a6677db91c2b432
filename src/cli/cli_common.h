// Pieces every `memoplan` subcommand shares: registration hooks and output helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "memoplan/heapmap.h"  // format_bytes
#include "memoplan/planner/plan.h"
#include "memoplan/planner/result.h"
#include "memoplan/planner/trace.h"

namespace memoplan::cli {

// Exit codes: 0 fine, 1 a plan is invalid (or validation failed), 2 bad input or usage, 3 no plan
// within `plan --capacity` was found.
inline constexpr int kExitInvalidPlan = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitOverCapacity = 3;

// Each adds its subcommand to `app`; the callback stores its exit code in `exit_code`.
void add_info_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_validate_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);
void add_heapmap_command(CLI::App& app, int& exit_code);

// `memoplan run ...` is handed to the memoplan-run executable next to this one, before parsing.
bool is_run_command(int argc, char** argv);
int exec_run_command(int argc, char** argv);  // returns only on failure (exit code 2)
void add_run_command(CLI::App& app);          // lists it in --help

// Prints "memoplan: error: MESSAGE" to stderr and returns kExitBadInput.
int fail(const std::string& message);

}  // namespace memoplan::cli

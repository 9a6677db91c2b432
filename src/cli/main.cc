// memoplan: plan, compare, validate and draw memory plans for DNN inference traces.
#include <CLI/CLI.hpp>

#include "cli_common.h"

int main(int argc, char** argv) {
  if (memoplan::cli::is_run_command(argc, argv)) return memoplan::cli::exec_run_command(argc, argv);
  CLI::App app{
      "memoplan: plans every allocation of an inference pass into one slab.\n"
      "Traces: memoplan JSON (optionally .gz) or CSV with columns size,begin,end[,id,align,name]."};
  app.set_version_flag("--version", "memoplan " MEMOPLAN_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  memoplan::cli::add_info_command(app, exit_code);
  memoplan::cli::add_plan_command(app, exit_code);
  memoplan::cli::add_validate_command(app, exit_code);
  memoplan::cli::add_compare_command(app, exit_code);
  memoplan::cli::add_heapmap_command(app, exit_code);
  memoplan::cli::add_run_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : memoplan::cli::kExitBadInput;
  }
  return exit_code;
}

// `memoplan run ...`: executes memoplan-run, the LibTorch half of the CLI, which sits next to this
// binary when the build found LibTorch. A separate executable so that `memoplan` itself never
// links LibTorch (it starts in milliseconds and builds without it).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli_common.h"

namespace memoplan::cli {
namespace {

constexpr const char* kRunBinary = "memoplan-run";

// The directory of the running executable: /proc/self/exe, not argv[0] (which may be a bare name
// found through PATH, or a symlink's).
std::string own_directory() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return "";
  const std::string exe(path.data(), static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

}  // namespace

bool is_run_command(int argc, char** argv) { return argc >= 2 && std::strcmp(argv[1], "run") == 0; }

int exec_run_command(int argc, char** argv) {
  const std::string directory = own_directory();
  const std::string binary = (directory.empty() ? "." : directory) + "/" + kRunBinary;
  if (access(binary.c_str(), X_OK) != 0) {
    return fail("this build has no LibTorch: memoplan run is not available (no " + binary + ")");
  }
  std::vector<char*> args = {const_cast<char*>(binary.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(binary.c_str(), args.data());
  return fail("cannot run " + binary + ": " + std::strerror(errno));  // execv returns on error
}

void add_run_command(CLI::App& app) {
  // Never parsed here (main() hands `memoplan run ...` to memoplan-run first): listed for --help.
  app.add_subcommand("run", "Run a TorchScript model unplanned and planned, compare (LibTorch)")
      ->prefix_command();
}

}  // namespace memoplan::cli

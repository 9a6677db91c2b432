#include "rss_probe.h"

#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

extern char** environ;

namespace memoplan::run {

ProbeRss measure_peak_rss(const RunOptions& options, const std::string& which, std::string* error) {
  std::vector<std::string> args = {"memoplan-run", options.model,
                                   "--threads",    std::to_string(options.threads),
                                   "--intra-op",   std::to_string(options.intra_op),
                                   "--iters",      std::to_string(options.iters),
                                   "--warmup",     std::to_string(options.warmup),
                                   "--strategy",   options.strategy,
                                   "--memory",     name(options.memory),
                                   "--kernels",    name(options.kernels),
                                   "--seed",       std::to_string(options.seed),
                                   "--draw",       options.draw,
                                   "--rss-probe",  which,
                                   "--quiet"};
  if (!options.input.empty()) args.insert(args.end(), {"--input", options.input});
  if (!options.dtype.empty()) args.insert(args.end(), {"--dtype", options.dtype});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (pipe(out) != 0) {
    *error = "pipe failed";
    return {};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    *error = fmt::format("cannot run the {} probe ({})", which, rc);
    return {};
  }
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  unsigned long long peak = 0, runtime = 0;
  const size_t at = text.find("runtime_rss_bytes ");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos ||
      std::sscanf(text.c_str() + at, "runtime_rss_bytes %llu peak_rss_bytes %llu", &runtime,
                  &peak) != 2) {
    *error = fmt::format("the {} probe failed (status {})", which, status);
    return {};
  }
  return {peak, runtime};
}

}  // namespace memoplan::run

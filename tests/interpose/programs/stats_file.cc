// stats_file and stats_interval_ms, end to end. The program starts itself again under the shim
// (LD_PRELOAD is inherited) with MEMOPLAN_CONF=stats_file:DIR/stats-%p.json,stats_interval_ms:20
// and watches the child's file while the child runs passes: the file appears, parses every time
// it is read (each version is renamed into place whole), names the child's pid and shows its
// counters growing. Then it stops the child and checks the file written at exit ("at_exit":true,
// at least the passes the child counted last) and that no DIR/*.tmp is left. The child also forks
// a grandchild that runs passes and exits: with %p in the path it writes a file of its own.
// Deadlines are generous (30 s); nothing waits a fixed time for the writer.
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/stats.h"
#include "program_check.h"

extern char** environ;

using nlohmann::json;

namespace {

constexpr auto kDeadline = std::chrono::seconds(30);

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The parent's directory, removed with what is in it when the parent exits (also after a failed
// CHECK); a directory that is already gone is left alone.
std::string work_dir;
void remove_work_dir() {
  if (work_dir.empty()) return;
  if (DIR* listing = opendir(work_dir.c_str())) {
    while (const dirent* entry = readdir(listing)) {
      if (entry->d_name[0] != '.') unlink((work_dir + "/" + entry->d_name).c_str());
    }
    closedir(listing);
  }
  rmdir(work_dir.c_str());
}

std::string read_file(const std::string& path, bool* found = nullptr) {
  std::ifstream in(path);
  if (found) *found = static_cast<bool>(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The file at `path`: null when it does not exist yet; otherwise it must parse (an empty or
// half-written file fails).
json read_stats(const std::string& path) {
  bool found = false;
  const std::string text = read_file(path, &found);
  if (!found) return nullptr;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fprintf(stderr, "%s is not whole: '%s'\n", path.c_str(), text.c_str());
  CHECK(j.is_object());
  return j;
}

uint64_t passes_of(const json& j) { return j["counters"]["passes"].get<uint64_t>(); }

// Passes, a millisecond apart, until `stop` exists (or the deadline: then fail).
void passes_until(const std::string& stop) {
  const auto deadline = std::chrono::steady_clock::now() + 2 * kDeadline;
  while (!exists(stop)) {
    CHECK(std::chrono::steady_clock::now() < deadline);
    one_pass();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

uint64_t passes_now() {
  std::vector<char> buf(65536);
  const int n = memoplan_stats_json(buf.data(), buf.size());
  CHECK(n > 0 && static_cast<size_t>(n) < buf.size());
  return passes_of(json::parse(buf.data()));
}

int child(const std::string& dir, pid_t parent) {
  // A parent that fails (and exits) takes the child with it.
  CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0);
  CHECK(getppid() == parent);
  CHECK(memoplan_stats_json != nullptr);
  // A grandchild forked before any pass: its own file (stats-<its pid>.json), written at its exit.
  const pid_t grandchild = fork();
  CHECK(grandchild >= 0);
  if (grandchild == 0) {
    std::thread([] {
      for (int i = 0; i < 20; ++i) one_pass();
    }).join();
    const std::string pid = std::to_string(getpid());
    std::ofstream(dir + "/grandchild-pid") << pid;
    exit(0);  // exit(): the library's destructor writes the file
  }
  int status = 0;
  CHECK(waitpid(grandchild, &status, 0) == grandchild);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::thread(passes_until, dir + "/stop").join();
  // What the shim counted last, for the parent to compare with the file written at exit.
  std::ofstream(dir + "/child-passes") << passes_now();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "child")) return child(argv[2], std::atoi(argv[3]));
  const char* preload = getenv("LD_PRELOAD");
  CHECK(preload && strstr(preload, "libmemoplan_preload"));
  CHECK(memoplan_stats_json != nullptr);

  char dir_template[] = "/tmp/memoplan-stats-file-XXXXXX";
  CHECK(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  work_dir = dir;
  atexit(remove_work_dir);
  // The child's environment: ours, with its own MEMOPLAN_CONF.
  const std::string conf = "MEMOPLAN_CONF=mode:auto,stats_print:true,stats_file:" + dir +
                           "/stats-%p.json" + ",stats_interval_ms:20";
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "MEMOPLAN_CONF=", 14) != 0) env.push_back(*e);
  }
  env.push_back(const_cast<char*>(conf.c_str()));
  env.push_back(nullptr);
  std::string self = "/proc/self/exe";
  char child_arg[] = "child";
  const std::string parent = std::to_string(getpid());
  char* args[] = {argv[0], child_arg, const_cast<char*>(dir.c_str()),
                  const_cast<char*>(parent.c_str()), nullptr};
  pid_t pid = 0;
  CHECK(posix_spawn(&pid, self.c_str(), nullptr, nullptr, args, env.data()) == 0);
  const std::string path = dir + "/stats-" + std::to_string(pid) + ".json";

  // While it runs: the file appears and its passes grow through several versions.
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  uint64_t first = 0, last = 0;
  int versions = 0, reads = 0;
  bool seen = false;
  while (versions < 5) {
    if (std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr, "%s: %s, %d growing versions in %d reads\n", path.c_str(),
              seen ? "seen" : "never appeared", versions, reads);
      kill(pid, SIGKILL);
      CHECK(false);
    }
    const json j = read_stats(path);
    ++reads;
    if (!j.is_null()) {
      CHECK(j["pid"].get<long>() == static_cast<long>(pid));
      CHECK(j["at_exit"] == false);
      CHECK(j["options"]["stats_interval_ms"] == 20);
      const uint64_t passes = passes_of(j);
      CHECK(passes >= last);
      if (!seen) {
        first = last = passes;
        seen = true;
      } else if (passes > last) {
        last = passes;
        ++versions;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(last > first);

  // Stop it; the file written at exit has everything it counted.
  std::ofstream(dir + "/stop") << "stop";
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const json final_stats = read_stats(path);
  CHECK(final_stats.is_object());
  CHECK(final_stats["at_exit"] == true);
  const uint64_t counted = std::stoull(read_file(dir + "/child-passes"));
  CHECK(counted >= last);
  CHECK(passes_of(final_stats) >= counted);

  // The grandchild's own file, written at its exit.
  const std::string grandchild_path =
      dir + "/stats-" + read_file(dir + "/grandchild-pid") + ".json";
  const json grandchild = read_stats(grandchild_path);
  if (grandchild.is_null()) fprintf(stderr, "no %s\n", grandchild_path.c_str());
  CHECK(grandchild.is_object());
  CHECK(grandchild["at_exit"] == true);
  CHECK(grandchild["counters"]["forks"] == 1);
  CHECK(passes_of(grandchild) == 20);

  // Nothing half-written left behind (remove_work_dir removes the directory at exit).
  DIR* listing = opendir(dir.c_str());
  CHECK(listing != nullptr);
  int files = 0;
  while (const dirent* entry = readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    const std::string name = entry->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      fprintf(stderr, "left behind: %s\n", name.c_str());
      CHECK(false);
    }
    ++files;
  }
  closedir(listing);
  CHECK(files == 5);  // two statistics files, grandchild-pid, stop, child-passes
  printf("stats file: %d growing versions in %d reads, %llu passes at exit\n", versions, reads,
         static_cast<unsigned long long>(passes_of(final_stats)));
  return 0;
}

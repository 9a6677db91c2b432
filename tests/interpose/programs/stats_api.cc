// memoplan_stats_json from a program: found through the weak declaration and through dlsym, the
// needed length returned for a buffer too small, valid JSON whose counters move as threads run
// passes (in mode:auto; nothing moves in mode:off), and snapshots taken while four threads
// allocate, each valid and none going back. Without the shim (no LD_PRELOAD) the symbol is absent
// and the program says so and succeeds.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/stats.h"
#include "program_check.h"

using nlohmann::json;

namespace {

using StatsFunction = int (*)(char*, size_t);
StatsFunction stats_function = nullptr;

json stats() {
  std::vector<char> buf(64);
  for (;;) {
    const int n = stats_function(buf.data(), buf.size());
    CHECK(n > 0);
    if (static_cast<size_t>(n) < buf.size()) {
      CHECK(strlen(buf.data()) == static_cast<size_t>(n));
      json j = json::parse(buf.data(), nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) fprintf(stderr, "not a JSON object: %s\n", buf.data());
      CHECK(j.is_object());
      return j;
    }
    buf.resize(static_cast<size_t>(n) + 1);
  }
}

uint64_t counter(const json& j, const char* name) { return j["counters"][name].get<uint64_t>(); }

void run_passes(int count, const std::atomic<bool>* stop) {
  for (int i = 0; stop ? !stop->load() : i < count; ++i) one_pass();
}

}  // namespace

int main() {
  const char* preload = getenv("LD_PRELOAD");
  const bool under_shim = preload && strstr(preload, "libmemoplan_preload");
  stats_function = reinterpret_cast<StatsFunction>(dlsym(RTLD_DEFAULT, "memoplan_stats_json"));
  if (!under_shim) {
    CHECK(stats_function == nullptr);
    CHECK(memoplan_stats_json == nullptr);  // the weak declaration
    puts("stats api: memoplan_stats_json is absent without the shim");
    return 0;
  }
  CHECK(stats_function != nullptr);
  CHECK(resolves_to_shim("memoplan_stats_json"));
  CHECK(stats_function == &memoplan_stats_json);
  const bool planning = shim_planning();

  // A buffer too small: cut short and NUL-terminated, and the length needed.
  char tiny[4];
  memset(tiny, 'x', sizeof tiny);
  const int needed = stats_function(tiny, sizeof tiny);
  CHECK(needed > static_cast<int>(sizeof tiny));
  CHECK(strcmp(tiny, "{\"v") == 0);
  CHECK(stats_function(nullptr, 0) > 100);
  std::vector<char> room(static_cast<size_t>(needed) + 256);
  const int n = stats_function(room.data(), room.size());
  CHECK(n > static_cast<int>(sizeof tiny) && strlen(room.data()) == static_cast<size_t>(n));

  const json before = stats();
  CHECK(before["pid"].get<long>() == static_cast<long>(getpid()));
  CHECK(before["at_exit"] == false);
  CHECK(before["options"]["mode"] == (planning ? "auto" : "off"));
  CHECK(before["threads"]["busiest"].is_array());

  // Passes on a thread of their own: its counts are flushed at every pass end and at its exit.
  const int passes = 40;
  std::thread(run_passes, passes, nullptr).join();
  const json after = stats();
  if (planning) {
    CHECK(counter(after, "passes") - counter(before, "passes") == static_cast<uint64_t>(passes));
    CHECK(counter(after, "requests") - counter(before, "requests") >= 6u * passes);
    CHECK(counter(after, "plans") == counter(before, "plans") + 1);
    CHECK(counter(after, "steady_hits") - counter(before, "steady_hits") >= 6u * (passes - 6));
    CHECK(after["peak_live_slab_bytes"].get<uint64_t>() > 0);
    CHECK(!after["threads"]["busiest"].empty());
  } else {
    CHECK(counter(after, "passes") == 0 && counter(after, "requests") == 0);
    CHECK(counter(after, "plans") == 0);
  }
  CHECK(after["threads"]["started"].get<uint64_t>() >=
        before["threads"]["started"].get<uint64_t>());

  // Snapshots while four threads run passes: each valid, none going back, and (planning) until
  // the counts have moved by 400 passes, a generous deadline.
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) workers.emplace_back(run_passes, 0, &stop);
  uint64_t last_passes = counter(after, "passes"), last_requests = counter(after, "requests");
  const uint64_t start_passes = last_passes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  for (int snapshots = 0; snapshots < 300 || (planning && last_passes < start_passes + 400);
       ++snapshots) {
    if (std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr, "the counters did not move: passes %llu\n",
              static_cast<unsigned long long>(last_passes));
      CHECK(false);
    }
    const json j = stats();
    CHECK(counter(j, "passes") >= last_passes);
    CHECK(counter(j, "requests") >= last_requests);
    last_passes = counter(j, "passes");
    last_requests = counter(j, "requests");
  }
  stop.store(true);
  for (std::thread& t : workers) t.join();
  printf("stats api: %s, %llu passes counted\n", planning ? "counters moved" : "mode:off",
         static_cast<unsigned long long>(counter(stats(), "passes")));
  return 0;
}

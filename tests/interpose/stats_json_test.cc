// Live statistics (memoplan_stats_json, stats_file) from the engine called directly: one valid
// JSON object with the report's figures, which move as threads run passes, snprintf's contract for
// the buffer, consistent snapshots while other threads allocate, and the file written whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine_harness.h"
#include "state.h"

namespace memoplan::shim::testing {
namespace {

using nlohmann::json;

// stats_json into a buffer as large as it says it needs.
std::string stats_text(bool at_exit = false) {
  std::vector<char> buf(256);
  for (;;) {
    const size_t n = stats_json(buf.data(), buf.size(), at_exit);
    if (n < buf.size()) {
      EXPECT_EQ(strlen(buf.data()), n);
      return std::string(buf.data(), n);
    }
    buf.resize(n + 1);
  }
}

json parsed_stats(bool at_exit = false) {
  const std::string text = stats_text(at_exit);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << text;
  return j;
}

uint64_t counter(const json& j, const char* name) {
  return j.at("counters").at(name).get<uint64_t>();
}

TEST(StatsJson, OneObjectWithTheReportsFigures) {
  engine_options();
  const json j = parsed_stats();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("pid").get<long>(), static_cast<long>(getpid()));
  EXPECT_EQ(j.at("at_exit"), false);
  EXPECT_EQ(parsed_stats(/*at_exit=*/true).at("at_exit"), true);
  // The options in force.
  const Options& o = global().options;
  EXPECT_EQ(j.at("options").at("mode"), to_string(o.mode));
  EXPECT_EQ(j.at("options").at("min_size").get<uint64_t>(), o.min_size);
  EXPECT_EQ(j.at("options").at("callsite_depth").get<uint64_t>(), o.callsite_depth);
  EXPECT_EQ(j.at("options").at("detect").get<bool>(), o.detect);
  EXPECT_EQ(j.at("options").at("trace"), o.trace_path);
  EXPECT_EQ(j.at("options").at("stats_file"), o.stats_file);
  EXPECT_TRUE(j.at("fallback_in_use").is_string());
  // Every counter of the runtime's list, every fallback reason, and the report's other figures.
  const json& c = j.at("counters");
#define MEMOPLAN_EXPECT_COUNTER(name) EXPECT_TRUE(c.at(#name).is_number_unsigned()) << #name;
  MEMOPLAN_COUNTERS(MEMOPLAN_EXPECT_COUNTER)
#undef MEMOPLAN_EXPECT_COUNTER
  for (int r = 0; r < replay::kFallbackKinds; ++r) {
    EXPECT_TRUE(c.at("fallbacks").at(to_string(static_cast<replay::Fallback>(r))).is_number());
  }
  for (const char* name :
       {"peak_live_slab_bytes", "steady_passes", "full_passes", "size_free_plans",
        "size_free_replans", "planned_percent", "planned_percent_of_all"}) {
    EXPECT_TRUE(j.at(name).is_number()) << name;
  }
  EXPECT_TRUE(j.at("requests").at("steady_state").is_number());
  EXPECT_TRUE(j.at("requests").at("before_steady_state").is_number());
  EXPECT_TRUE(j.at("threads").at("busiest").is_array());
  // The same figures as the counters themselves.
  const Counters now = counters();
  EXPECT_EQ(counter(j, "plans"), now.plans);
}

// Escaped strings stay valid JSON: quotes, backslashes and control characters in a path.
TEST(StatsJson, StringsAreEscaped) {
  engine_options();
  char saved[kPathCapacity];
  memcpy(saved, global().options.log_path, sizeof saved);
  const char* odd = "/tmp/a \"quoted\" \\ back\tslash\x01.log";
  strcpy(global().options.log_path, odd);
  const json j = parsed_stats();
  memcpy(global().options.log_path, saved, sizeof saved);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("options").at("log"), odd);
}

TEST(StatsJson, ReturnsTheLengthItNeededLikeSnprintf) {
  engine_options();
  const std::string full = stats_text();
  // What fits in the length returned (and a NUL) is the whole object.
  ASSERT_TRUE(json::parse(full, nullptr, false).is_object()) << full;
  ASSERT_EQ(full.back(), '}');
  const size_t needed = stats_json(nullptr, 0, false);
  EXPECT_EQ(needed, full.size());
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  EXPECT_EQ(stats_json(tiny, sizeof tiny, false), full.size());
  EXPECT_EQ(strlen(tiny), sizeof tiny - 1);  // cut short, NUL-terminated
  EXPECT_EQ(std::string(tiny), full.substr(0, sizeof tiny - 1));
  char one = 'x';
  EXPECT_EQ(stats_json(&one, 1, false), full.size());
  EXPECT_EQ(one, '\0');
  // Exactly the length: no room for the NUL, so the last character goes.
  std::vector<char> exact(full.size());
  EXPECT_EQ(stats_json(exact.data(), exact.size(), false), full.size());
  EXPECT_EQ(std::string(exact.data()), full.substr(0, full.size() - 1));
  // The exported function: the same, as an int.
  std::vector<char> room(full.size() + 1);
  EXPECT_EQ(engine_stats_json(room.data(), room.size()), static_cast<int>(full.size()));
  EXPECT_EQ(std::string(room.data()), full);
  EXPECT_EQ(engine_stats_json(nullptr, 0), static_cast<int>(full.size()));
}

// Counters move as a thread runs passes, while it runs (its flushes at pass ends) and after it
// exits; a running thread's steady state shows in the busiest threads.
TEST(StatsJson, CountersMoveWithPasses) {
  SKIP_UNLESS_ENGINE_PLANS();
  engine_options();
  const json before = parsed_stats();
  const int passes = static_cast<int>(first_steady_pass()) + 3;
  std::mutex m;
  std::condition_variable cv;
  bool done = false, finish = false;
  uint32_t index = 0;
  std::thread worker([&] {
    Heap heap;
    for (int pass = 0; pass < passes; ++pass) heap.pass(network_pass());
    std::unique_lock<std::mutex> lock(m);
    index = tls_state->index;
    done = true;
    cv.notify_all();
    cv.wait(lock, [&] { return finish; });
  });
  json running;
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done; });
    running = parsed_stats();
    finish = true;
    cv.notify_all();
  }
  worker.join();
  const json after = parsed_stats();
  ASSERT_TRUE(running.is_object());
  const uint64_t per_pass = allocations_in(network_pass());
  EXPECT_EQ(counter(running, "passes") - counter(before, "passes"), static_cast<uint64_t>(passes));
  EXPECT_GE(counter(running, "requests") - counter(before, "requests"), passes * per_pass);
  EXPECT_EQ(counter(running, "plans") - counter(before, "plans"), 1u);
  EXPECT_GE(counter(running, "steady_hits") - counter(before, "steady_hits"), 2 * per_pass);
  EXPECT_GT(running.at("peak_live_slab_bytes").get<uint64_t>(), 0u);
  EXPECT_GE(running.at("threads").at("running").get<uint64_t>(), 1u);  // the worker
  bool listed = false;
  for (const json& t : running.at("threads").at("busiest")) {
    if (t.at("thread").get<uint32_t>() != index) continue;
    listed = true;
    EXPECT_GE(t.at("steady_state").get<uint64_t>(), 2 * per_pass) << running.dump();
    EXPECT_EQ(t.at("steady_state_hits"), t.at("steady_state"));
  }
  // Listed unless the list is full of busier threads (earlier tests' in the same process: CTest
  // runs each test alone, where the worker is the only thread with steady-state requests).
  const size_t listed_threads = running.at("threads").at("busiest").size();
  EXPECT_TRUE(listed || listed_threads == 8)
      << "thread " << index << " is not among the busiest: " << running.dump();
  EXPECT_EQ(counter(after, "passes"), counter(running, "passes"));
  EXPECT_EQ(counter(after, "planned_hits"), counter(running, "planned_hits"));
  EXPECT_EQ(after.at("threads").at("running").get<uint64_t>() + 1,
            running.at("threads").at("running").get<uint64_t>());
}

// Snapshots taken while four threads run passes: each valid, and the counts never go back (a
// thread's flush moves its counts into the process-wide ones under the snapshot's lock).
TEST(StatsJson, ConsistentWhileOtherThreadsAllocate) {
  SKIP_UNLESS_ENGINE_PLANS();
  engine_options();
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&] {
      Heap heap;
      heap.pass(network_pass());
      started.fetch_add(1);
      while (!stop.load()) heap.pass(network_pass());
    });
  }
  while (started.load() < 4) std::this_thread::yield();
  uint64_t passes = 0, requests = 0, hits = 0;
  const uint64_t first_passes = counter(parsed_stats(), "passes");
  char buf[16384];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int snapshots = 0;
  // At least 200 snapshots, and until the counts have moved by many passes.
  while (snapshots < 200 || passes < first_passes + 200) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the passes did not move";
    const size_t n = stats_json(buf, sizeof buf, false);
    ASSERT_LT(n, sizeof buf);
    const json j = json::parse(buf, nullptr, false);
    ASSERT_TRUE(j.is_object()) << buf;
    EXPECT_GE(counter(j, "passes"), passes);
    EXPECT_GE(counter(j, "requests"), requests);
    EXPECT_GE(counter(j, "planned_hits"), hits);
    passes = counter(j, "passes");
    requests = counter(j, "requests");
    hits = counter(j, "planned_hits");
    ++snapshots;
  }
  stop.store(true);
  for (std::thread& t : workers) t.join();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The file: written whole under its expanded name (%p), the temporary renamed away; rewritten with
// fresh figures; a directory that does not exist is reported, not fatal.
TEST(StatsFile, WrittenWholeAndRenamed) {
  engine_options();
  char dir[] = "/tmp/memoplan-stats-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string pattern = std::string(dir) + "/stats-%p-100%%.json";
  const std::string path = std::string(dir) + "/stats-" + std::to_string(getpid()) + "-100%.json";
  ASSERT_TRUE(write_stats_file(pattern.c_str(), false));
  const std::string first_text = read_file(path);
  ASSERT_FALSE(first_text.empty());
  EXPECT_EQ(first_text.back(), '\n');
  const json first = json::parse(first_text, nullptr, false);
  ASSERT_TRUE(first.is_object()) << first_text;
  EXPECT_EQ(first.at("pid").get<long>(), static_cast<long>(getpid()));
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  if (engine_plans()) {
    on_fresh_thread([] {
      Heap heap;
      for (int pass = 0; pass < 3; ++pass) heap.pass(network_pass());
    });
    ASSERT_TRUE(write_stats_file(pattern.c_str(), false));
    const json second = json::parse(read_file(path), nullptr, false);
    ASSERT_TRUE(second.is_object());
    EXPECT_EQ(counter(second, "passes"), counter(first, "passes") + 3);
  }
  EXPECT_FALSE(write_stats_file((std::string(dir) + "/missing/stats.json").c_str(), false));
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace memoplan::shim::testing

#include "fault_test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "state.h"
#include "stats.h"

namespace memoplan::shim::testing {

FaultCounters fault_counters() {
  const Stats& s = stats();
  FaultCounters c;
  c.plans = s.plans.load();
  c.plan_failures = s.plan_failures.load();
  c.planned_hits = s.planned_hits.load();
  c.steady_fallbacks = s.steady_fallbacks.load();
  c.remote_frees = s.remote_frees.load();
  c.out_of_memory = s.out_of_memory.load();
  c.bookkeeping_failures = s.bookkeeping_failures.load();
  c.address_space_failures = s.address_space_failures.load();
  c.tag_commit_failures = s.tag_commit_failures.load();
  c.slab_map_failures = s.slab_map_failures.load();
  c.late_slab_releases = s.late_slab_releases.load();
  c.forks = s.forks.load();
  c.not_planned = s.fallbacks[static_cast<int>(FallbackReason::kNotPlanned)].load();
  return c;
}

FaultCounters operator-(const FaultCounters& a, const FaultCounters& b) {
  FaultCounters d;
  d.plans = a.plans - b.plans;
  d.plan_failures = a.plan_failures - b.plan_failures;
  d.planned_hits = a.planned_hits - b.planned_hits;
  d.steady_fallbacks = a.steady_fallbacks - b.steady_fallbacks;
  d.remote_frees = a.remote_frees - b.remote_frees;
  d.out_of_memory = a.out_of_memory - b.out_of_memory;
  d.bookkeeping_failures = a.bookkeeping_failures - b.bookkeeping_failures;
  d.address_space_failures = a.address_space_failures - b.address_space_failures;
  d.tag_commit_failures = a.tag_commit_failures - b.tag_commit_failures;
  d.slab_map_failures = a.slab_map_failures - b.slab_map_failures;
  d.late_slab_releases = a.late_slab_releases - b.late_slab_releases;
  d.forks = a.forks - b.forks;
  d.not_planned = a.not_planned - b.not_planned;
  return d;
}

uint32_t slabs_in_use() { return global().slabs.slots_in_use(); }

void expect_in_fresh_process(const std::string& extra_conf, const std::function<int()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (global().init_state.load() != 0) {
          fprintf(stderr, "the engine was initialized before the test body\n");
          _exit(2);
        }
        const char* conf = getenv("MEMOPLAN_CONF");
        const std::string full = std::string(conf && *conf ? conf : "") +
                                 (conf && *conf && !extra_conf.empty() ? "," : "") + extra_conf;
        setenv("MEMOPLAN_CONF", full.c_str(), 1);
        const int status = body();
        fflush(stderr);
        _exit(status);
      },
      ::testing::ExitedWithCode(0), "");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace memoplan::shim::testing

// deviation_fuzz: random plans, replayed with random deviations, on several threads at once.
//
// Each worker thread makes up a random pass (4-40 blocks, sizes 64 B-32 KiB, some aligned or
// zeroed, random lifetimes, some escaping into the next pass), lets the engine profile and plan it,
// then replays it for --plan-passes passes with deviations of every kind: allocations skipped,
// added (with a planned size), resized, reordered, kept alive into later passes, freed by another
// thread, realloc'ed. Then the thread exits (sometimes leaving blocks to others) and a new one with
// a new random pass takes its place. Every block gets a distinct pattern, checked before it is
// freed; every new block is checked against every block alive in the process. Exits non-zero when
// one overlaps or a pattern broke.
//
//   deviation_fuzz [--passes N] [--seed S] [--threads T] [--plan-passes P] [--enomem-ppm R]
//                  [--report text|json]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "deviation_fuzz_support.h"
#include "engine.h"
#include "fault_injection.h"
#include "stats.h"

using namespace memoplan::shim;
using namespace memoplan::shim::fuzz;

namespace {

struct Config {
  uint64_t passes = 20000;
  uint64_t seed = 1;
  int threads = 4;
  uint64_t plan_passes = 200;
  uint32_t enomem_ppm = 0;
  bool json = false;
};

bool parse(int argc, char** argv, Config& c) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!value) return false;
    if (arg == "--passes") {
      c.passes = strtoull(value, nullptr, 10);
    } else if (arg == "--seed") {
      c.seed = strtoull(value, nullptr, 10);
    } else if (arg == "--threads") {
      c.threads = atoi(value);
    } else if (arg == "--plan-passes") {
      c.plan_passes = strtoull(value, nullptr, 10);
    } else if (arg == "--enomem-ppm") {
      c.enomem_ppm = static_cast<uint32_t>(strtoul(value, nullptr, 10));
    } else if (arg == "--report") {
      c.json = !strcmp(value, "json");
    } else {
      return false;
    }
    ++i;
  }
  return c.threads >= 1 && c.threads <= 64 && c.plan_passes >= 8;
}

void report(const Config& c, const Shared& shared, double seconds) {
  const Stats& s = stats();
  auto get = [](const std::atomic<uint64_t>& a) {
    return static_cast<unsigned long long>(a.load());
  };
  const unsigned long long passes = get(shared.passes), overlaps = get(shared.overlaps),
                           corruptions = get(shared.corruptions);
  if (c.json) {
    printf(
        "{\"passes\": %llu, \"seed\": %llu, \"threads\": %d, \"plan_passes\": %llu, "
        "\"enomem_ppm\": %u, \"seconds\": %.2f, \"plans\": %llu, \"deviations\": {",
        passes, static_cast<unsigned long long>(c.seed), c.threads,
        static_cast<unsigned long long>(c.plan_passes), c.enomem_ppm, seconds, get(s.plans));
    for (int k = 0; k < kDeviationKinds; ++k) {
      printf("%s\"%s\": %llu", k ? ", " : "", deviation_name(k), get(shared.deviations[k]));
    }
    printf("}, \"planned_hits\": %llu, \"fallbacks\": {", get(s.planned_hits));
    for (int r = 0; r < static_cast<int>(FallbackReason::kCount); ++r) {
      printf("%s\"%s\": %llu", r ? ", " : "", to_string(static_cast<FallbackReason>(r)),
             get(s.fallbacks[r]));
    }
    printf(
        "}, \"out_of_memory\": %llu, \"null_answers\": %llu, \"remote_frees\": %llu, "
        "\"late_slab_releases\": %llu, \"blocks\": %llu, \"overlaps\": %llu, "
        "\"corruptions\": %llu}\n",
        get(s.out_of_memory), get(shared.null_answers), get(s.remote_frees),
        get(s.late_slab_releases), get(shared.blocks), overlaps, corruptions);
  } else {
    printf(
        "deviation_fuzz: %llu passes (seed %llu, %d threads, %llu passes per plan, enomem "
        "%u ppm) in %.2f s\n",
        passes, static_cast<unsigned long long>(c.seed), c.threads,
        static_cast<unsigned long long>(c.plan_passes), c.enomem_ppm, seconds);
    printf("plans %llu, blocks %llu, planned hits %llu, fallbacks", get(s.plans),
           get(shared.blocks), get(s.planned_hits));
    for (int r = 0; r < static_cast<int>(FallbackReason::kCount); ++r) {
      printf(" %s %llu", to_string(static_cast<FallbackReason>(r)), get(s.fallbacks[r]));
    }
    printf("\ndeviations:");
    for (int k = 0; k < kDeviationKinds; ++k) {
      printf(" %s %llu", deviation_name(k), get(shared.deviations[k]));
    }
    printf("\nremote frees %llu, late slab releases %llu, out of memory %llu (NULL answers %llu)\n",
           get(s.remote_frees), get(s.late_slab_releases), get(s.out_of_memory),
           get(shared.null_answers));
    printf("overlaps %llu, corruptions %llu: %s\n", overlaps, corruptions,
           overlaps || corruptions ? "FAILED" : "ok");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  if (!parse(argc, argv, config)) {
    fprintf(stderr,
            "usage: deviation_fuzz [--passes N] [--seed S] [--threads T] [--plan-passes P>=8] "
            "[--enomem-ppm R] [--report text|json]\n");
    return 2;
  }
  // Size-only keys (no unwinding: fast, and the same under ThreadSanitizer), small blocks planned
  // too, room for every worker's slab and those of exited ones whose blocks are still alive (16 MiB
  // each holds any random pass: the 16 GiB of slabs fit under ThreadSanitizer too).
  // MEMOPLAN_CONF, when set, comes after and wins.
  std::string conf = "callsite_depth:0,min_size:64,threads:1024,slab_max:16m";
  if (const char* extra = getenv("MEMOPLAN_CONF")) conf += std::string(",") + extra;
  setenv("MEMOPLAN_CONF", conf.c_str(), 1);
  engine_free(engine_alloc(1, 16, false));  // reads MEMOPLAN_CONF
  if (global().mode_off) {
    fprintf(stderr, "deviation_fuzz: the engine runs unplanned here (no address space?)\n");
    return 1;
  }
  if (config.enomem_ppm) {
    fault::Rule rule;
    rule.per_million = config.enomem_ppm;
    rule.seed = config.seed;
    fault::set_rule(fault::Site::kFallbackAlloc, rule);
  }
  Shared shared(config.threads, config.passes, config.enomem_ppm != 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> lanes;
  for (int lane = 0; lane < config.threads; ++lane) {
    lanes.emplace_back([&, lane] {
      for (uint64_t round = 0; !shared.done(); ++round) {
        const uint64_t seed = config.seed * 1000003 + static_cast<uint64_t>(lane) * 7919 + round;
        // A fresh thread: fresh engine state, a new random pass and plan.
        std::thread([&] { run_plan(shared, lane, seed, config.plan_passes); }).join();
      }
    });
  }
  for (std::thread& t : lanes) t.join();
  drain_all(shared);
  fault::clear_rules();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report(config, shared, seconds);
  return shared.overlaps.load() || shared.corruptions.load() ? 1 : 0;
}

// The size-free search's live counts (size_free_search.h): alive_at_each against a direct count
// over random allocation/free histories, including blocks still alive and blocks freed after
// `now`'s window, and an empty history.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine_harness.h"
#include "memoplan/record/record_log.h"
#include "size_free_search.h"

namespace memoplan::shim {
namespace {

struct History {
  std::vector<uint64_t> begins, ends;
  uint64_t now = 0;
};

// Allocations and frees on one clock: each step allocates (a new record) or frees a random live
// block; what is left alive at the end keeps record::kLive. Ticks start at `first_tick`.
History random_history(std::mt19937_64& rng, uint64_t steps, uint64_t first_tick) {
  History h;
  std::vector<size_t> live;
  uint64_t tick = first_tick;
  for (uint64_t s = 0; s < steps; ++s, ++tick) {
    if (live.empty() || rng() % 5 < 3) {
      live.push_back(h.begins.size());
      h.begins.push_back(tick);
      h.ends.push_back(record::kLive);
    } else {
      const size_t k = rng() % live.size();
      h.ends[live[k]] = tick;
      live[k] = live.back();
      live.pop_back();
    }
  }
  h.now = tick;
  return h;
}

std::vector<uint64_t> direct_count(const History& h) {
  std::vector<uint64_t> alive(h.begins.size());
  for (size_t i = 0; i < h.begins.size(); ++i) {
    for (size_t j = 0; j < i; ++j) alive[i] += h.ends[j] > h.begins[i];
  }
  return alive;
}

TEST(AliveAtEach, EqualsADirectCountOnRandomHistories) {
  (void)testing::engine_options();  // the fallback allocator the bitmap comes from
  std::mt19937_64 rng(53);
  for (int trial = 0; trial < 300; ++trial) {
    const History h = random_history(rng, 1 + rng() % 700, rng() % 1000);
    std::vector<uint64_t> alive(h.begins.size(), ~uint64_t{0});
    ASSERT_TRUE(
        alive_at_each(h.begins.data(), h.ends.data(), h.begins.size(), h.now, alive.data()));
    ASSERT_EQ(alive, direct_count(h)) << "trial " << trial;
  }
}

// The records searched are the newest of a longer log: a block freed at a tick the window also
// holds counts; records allocated in the window and alive past `now` count as alive.
TEST(AliveAtEach, CountsOnlyTheRecordsGivenAndAnEmptyWindowIsFine) {
  (void)testing::engine_options();
  const std::vector<uint64_t> begins = {100, 101, 103, 104, 106};
  const std::vector<uint64_t> ends = {102, record::kLive, 105, 200, record::kLive};
  std::vector<uint64_t> alive(begins.size());
  ASSERT_TRUE(alive_at_each(begins.data(), ends.data(), begins.size(), 107, alive.data()));
  EXPECT_EQ(alive, (std::vector<uint64_t>{0, 1, 1, 2, 2}));
  EXPECT_TRUE(alive_at_each(nullptr, nullptr, 0, 107, nullptr));
}

}  // namespace
}  // namespace memoplan::shim

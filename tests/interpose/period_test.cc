// find_period: the automatic pass detection, on synthetic allocation histories. A history is built
// from a pass "shape" (the keys in pass order and how long each block lives, in allocations)
// repeated pass after pass, on the same event clock the shim uses (one tick per allocation or
// free).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "period.h"
#include "period_history.h"
#include "state.h"

namespace memoplan::shim {
namespace {

using namespace histories;

TEST(FindPeriod, FindsAnExactPeriod) {
  const History h = repeat(distinct_keys(7), 4);
  const PeriodResult r = search(h);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 7u);
  // The start is a complete pass inside the history, within the newest two passes.
  EXPECT_GE(r.start + 2 * r.period, h.keys.size());
  EXPECT_LE(r.start + r.period, h.keys.size());
}

TEST(FindPeriod, NeedsThreePasses) {
  const std::vector<BlockShape> shape = distinct_keys(10);
  EXPECT_FALSE(search(repeat(shape, 2)).found);
  EXPECT_FALSE(search(repeat(shape, 3, 29)).found);  // one short of three passes
  const PeriodResult r = search(repeat(shape, 3));
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 10u);
}

TEST(FindPeriod, ShortHistoriesFindNothing) {
  History h = repeat(distinct_keys(1), 2);
  EXPECT_FALSE(search(h).found);
  h.keys.clear();
  h.begins.clear();
  h.ends.clear();
  EXPECT_FALSE(search(h).found);
}

TEST(FindPeriod, PeriodOfOneKey) {
  const PeriodResult r = search(repeat({{7, 0}}, 5));
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 1u);
}

// LibTorch 2.6's start-up (operator registration) makes hundreds of equal requests of 4 KiB or
// more on the main thread and keeps them all: periodic with period 1, but not a pass.
TEST(FindPeriod, EqualRequestsKeptForGoodAreNotAPass) {
  History kept;
  for (uint64_t i = 0; i < 400; ++i) {
    kept.keys.push_back(7);
    kept.begins.push_back(i);
    kept.ends.push_back(record::kLive);
  }
  EXPECT_FALSE(search(kept, kMaxPeriod, 0, 256).found);
  // The same requests, each freed before the next: a pass of one allocation.
  const History freed = repeat({{7, 0}}, 400);
  const PeriodResult r = search(freed, kMaxPeriod, 0, 256);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 1u);
  // Freed a pass later (an output held until the next pass replaces it): still a pass.
  History held;
  for (uint64_t i = 0; i < 400; ++i) {
    held.keys.push_back(7);
    held.begins.push_back(2 * i);
    held.ends.push_back(i + 1 < 400 ? 2 * i + 3 : record::kLive);
  }
  EXPECT_TRUE(search(held, kMaxPeriod, 0, 256).found);
}

TEST(FindPeriod, RandomKeysHaveNoPeriod) {
  std::mt19937_64 random(42);
  History h;
  for (uint64_t i = 0; i < 3000; ++i) {
    h.keys.push_back(random() % 1000);
    h.begins.push_back(2 * i);
    h.ends.push_back(2 * i + 1);
  }
  EXPECT_FALSE(search(h).found);
}

TEST(FindPeriod, NoiseAfterThePassesHidesThePeriod) {
  // A new program phase: the newest allocations do not repeat the earlier passes.
  History h = repeat(distinct_keys(8), 5);
  uint64_t tick = h.begins.back() + 10;
  for (uint64_t key : {900, 901, 902, 903, 904, 905}) {
    h.keys.push_back(key);
    h.begins.push_back(tick++);
    h.ends.push_back(tick++);
  }
  EXPECT_FALSE(search(h).found);
}

TEST(FindPeriod, PeriodLongerThanMaxPeriodIsNotFound) {
  const History h = repeat(distinct_keys(50), 4);
  EXPECT_FALSE(search(h, 49).found);
  EXPECT_TRUE(search(h, 50).found);
}

// A pass with a repeated layer: stem, `layers` x (a, b, c), head. Inside a layer the blocks chain
// (each lives until the next is made), and the layer output lives into the next layer, as the
// activations of a network do; nothing lives past the head.
std::vector<BlockShape> layered_pass(uint64_t layers) {
  std::vector<BlockShape> shape = {{1, 1}};
  for (uint64_t l = 0; l < layers; ++l) {
    shape.push_back({10, 1});
    shape.push_back({11, 1});
    shape.push_back({12, 1});
  }
  shape.push_back({2, 0});
  return shape;
}

TEST(FindPeriod, RepeatedLayerDoesNotWinOnceThreePassesAreSeen) {
  const std::vector<BlockShape> shape = layered_pass(6);  // 20 allocations, layer period 3
  const uint64_t pass = shape.size();
  // Search after every allocation from three whole passes to five: the newest key is anywhere
  // in the pass, the middle of the layers included.
  for (uint64_t n = 3 * pass; n <= 5 * pass; ++n) {
    const PeriodResult r = search(repeat(shape, 5, n));
    ASSERT_TRUE(r.found) << "n=" << n;
    EXPECT_EQ(r.period, pass) << "n=" << n;
  }
}

TEST(FindPeriod, InsideOnePassTheLayerWinsUnlessAKeyOutsideItIsRequired) {
  // The first search of a long pass made of layers sees only the layers: period 3. Re-detection
  // requires the key the layer plan did not know (the head, 2), which rules out every period
  // inside the layers; three whole passes later the pass period is found.
  const std::vector<BlockShape> shape = layered_pass(30);  // 92 allocations
  const uint64_t pass = shape.size();
  const PeriodResult layer = search(repeat(shape, 1, 40));
  ASSERT_TRUE(layer.found);
  EXPECT_EQ(layer.period, 3u);
  EXPECT_FALSE(search(repeat(shape, 2, pass + 40), kMaxPeriod, /*required_key=*/2).found);
  for (uint64_t n = 3 * pass; n <= 4 * pass; n += 7) {
    const PeriodResult r = search(repeat(shape, 5, n), kMaxPeriod, /*required_key=*/2);
    ASSERT_TRUE(r.found) << "n=" << n;
    EXPECT_EQ(r.period, pass) << "n=" << n;
  }
  // A key that never occurred: nothing qualifies.
  EXPECT_FALSE(search(repeat(shape, 5), kMaxPeriod, /*required_key=*/99).found);
}

TEST(FindPeriod, BoundaryIsPlacedWhereFewestBlocksAreAlive) {
  // Activations chain through the whole pass, so the only point with nothing alive is between
  // passes: the start must land on a pass start whatever the newest allocation is.
  const std::vector<BlockShape> shape = layered_pass(4);
  const uint64_t pass = shape.size();
  for (uint64_t n = 3 * pass; n <= 4 * pass + pass / 2; ++n) {
    const History h = repeat(shape, 5, n);
    const PeriodResult r = search(h);
    ASSERT_TRUE(r.found) << "n=" << n;
    ASSERT_EQ(r.period, pass);
    EXPECT_EQ(r.start % pass, 0u) << "n=" << n;
    EXPECT_LE(r.start + r.period, n);
  }
}

TEST(FindPeriod, BoundaryFollowsTheLiveCountNotTheFirstKeySeen) {
  // The history starts in the middle of a pass (with key 4), so "where the history starts" is
  // not a pass boundary. Blocks 1..3 live until block 6 is made; blocks 4..6 die at once: the only
  // point with nothing alive is just before key 1.
  const std::vector<BlockShape> shape = {{1, 5}, {2, 4}, {3, 3}, {4, 0}, {5, 0}, {6, 0}};
  History h = repeat(shape, 5);
  // Drop the first three records so the history begins with key 4.
  for (auto* column : {&h.keys, &h.begins, &h.ends}) {
    column->erase(column->begin(), column->begin() + 3);
  }
  const PeriodResult r = search(h);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 6u);
  EXPECT_EQ(h.keys[r.start], 1u);
}

// A layer made of one key repeated 70 times: with the newest allocation inside that run, the pass
// period is its 70th earlier occurrence (a search that took the 64 nearest missed it).
TEST(FindPeriod, LongRunOfOneKeyDoesNotHideThePassPeriod) {
  std::vector<BlockShape> shape = {{1, 1}};
  for (int i = 0; i < 70; ++i) shape.push_back({10, 1});
  shape.push_back({2, 0});
  const uint64_t pass = shape.size();                              // 72
  const PeriodResult r = search(repeat(shape, 5, 4 * pass + 50));  // newest: the 49th key 10
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, pass);
}

// The zoo's GPT decoder under the shim: start-up requests (some made twice, the rest once), then
// passes of a few head keys and 12 identical layers of 22 requests, one key 10 times in each;
// the newest request is anywhere in the pass. With the 64 nearest occurrences of the newest key
// as candidates (half a pass of them here) and a rare start-up key as the second anchor, the pass
// was found about 20 passes late; every search from three passes on must find it now.
TEST(FindPeriod, PassOfManyLayersIsFoundWhereverTheSearchLands) {
  std::vector<BlockShape> shape = {{1, 2}, {2, 1}, {3, 200}};
  for (int layer = 0; layer < 12; ++layer) {
    for (uint64_t k = 0; k < 12; ++k) shape.push_back({20 + k, 2});
    for (int repeat_key = 0; repeat_key < 10; ++repeat_key) shape.push_back({40, 1});
  }
  shape.push_back({4, 1});
  shape.push_back({5, 0});
  const uint64_t pass = shape.size();  // 269
  std::vector<BlockShape> start;
  for (uint64_t i = 0; i < 400; ++i) start.push_back({1000 + i % 300, 0});  // 100 made twice
  for (uint64_t i = 0; i < 300; ++i) start.push_back({40, 0});  // the layer key, in start-up too
  History h = repeat(start, 1);
  const History passes = repeat(shape, 6);
  const uint64_t tick0 = h.begins.size() * 2;
  for (size_t i = 0; i < passes.keys.size(); ++i) {
    h.keys.push_back(passes.keys[i]);
    h.begins.push_back(tick0 + passes.begins[i]);
    h.ends.push_back(passes.ends[i] == record::kLive ? record::kLive : tick0 + passes.ends[i]);
  }
  const uint64_t head = start.size();
  for (uint64_t n = head + 3 * pass + 1; n <= head + 6 * pass; n += 7) {
    History cut = h;
    cut.keys.resize(n);
    cut.begins.resize(n);
    cut.ends.resize(n);
    for (uint64_t& end : cut.ends) {
      if (end != record::kLive && end > cut.begins[n - 1]) end = record::kLive;
    }
    const PeriodResult r = search(cut, kMaxPeriod, 0, /*min_run=*/256);
    ASSERT_TRUE(r.found) << "n=" << n;
    EXPECT_EQ(r.period, pass) << "n=" << n;
  }
}

// The minimum run: a pass of six identical layers (20 allocations) is periodic with the layer for
// 18 allocations inside a pass; with a minimum run longer than that, the layer never qualifies
// and the pass is found once its period has held for the minimum run.
TEST(FindPeriod, AMinimumRunKeepsTheLayerOutUntilThePassHasHeld) {
  const std::vector<BlockShape> shape = layered_pass(6);
  const uint64_t pass = shape.size();  // 20
  for (uint64_t n = 4; n < 60 + pass; ++n) {
    const PeriodResult r = search(repeat(shape, 20, n), kMaxPeriod, 0, /*min_run=*/60);
    EXPECT_FALSE(r.found && r.period != pass) << "n=" << n << " period " << r.period;
  }
  EXPECT_FALSE(search(repeat(shape, 20, 60 + pass - 1), kMaxPeriod, 0, 60).found);
  const PeriodResult r = search(repeat(shape, 20, 100), kMaxPeriod, 0, /*min_run=*/60);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, pass);
}

// Re-detection after a plan of `min_period - 1` allocations missed a request: shorter periods do
// not qualify even when they hold the missed key.
TEST(FindPeriod, AMinimumPeriodRulesOutPeriodsAsShortAsTheOldPlan) {
  const std::vector<BlockShape> shape = layered_pass(30);  // 92 allocations, layer period 3
  const uint64_t pass = shape.size();
  // Inside the layers the newest key (12) is periodic with 3; min_period 4 rules that out.
  EXPECT_EQ(search(repeat(shape, 1, 40), kMaxPeriod, /*required_key=*/12, 0, 1).period, 3u);
  const PeriodResult inside = search(repeat(shape, 1, 40), kMaxPeriod, 12, 0, 4);
  EXPECT_TRUE(!inside.found || inside.period >= 4) << inside.period;
  const PeriodResult r = search(repeat(shape, 5, 3 * pass + 40), kMaxPeriod, 12, 0, 4);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, pass);
}

// Re-detection without the missed key (it stopped coming): a longer period that is a whole number
// of the old plan's layers is not the pass either; the pass is found once three have been seen.
TEST(FindPeriod, NoWholeNumberOfTheOldLayerIsTakenForThePass) {
  const std::vector<BlockShape> shape = layered_pass(30);  // 92 allocations, layer period 3
  const uint64_t pass = shape.size();
  const PeriodResult layers = search(repeat(shape, 1, 60), kMaxPeriod, 0, /*min_run=*/0, 4);
  ASSERT_TRUE(layers.found);
  EXPECT_EQ(layers.period % 3, 0u) << layers.period;
  EXPECT_FALSE(search(repeat(shape, 1, 60), kMaxPeriod, 0, 0, 4, /*not_multiple_of=*/3).found);
  const PeriodResult r = search(repeat(shape, 5, 3 * pass + 40), kMaxPeriod, 0, 0, 4, 3);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, pass);
}

}  // namespace
}  // namespace memoplan::shim

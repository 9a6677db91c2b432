// The pass detector's key filters on synthetic key sequences: keep_regular (keys whose count
// varies between passes dropped), counts_repeat (a pass's head told from irregular work) and
// keep_recurring (keys made once dropped, so one-off requests between passes no longer hide the
// period).
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

// keep_regular: passes of five keys with, between passes, one to three requests of two recurring
// keys (a response grown by doubling): anchored on a key the pass makes once, the pass's keys are
// kept in order with their original indices, the irregular ones dropped and reported, and the
// kept records have the pass's period. An anchor that is itself irregular keeps nothing useful.
TEST(KeepRegular, DropsKeysWhoseCountVariesBetweenPassesAndTheRestIsPeriodic) {
  std::vector<uint64_t> keys;
  const std::vector<uint64_t> pass = {1, 2, 3, 2, 4};
  for (int p = 0; p < 40; ++p) {
    keys.insert(keys.end(), pass.begin(), pass.end());
    keys.push_back(90);                  // every response makes this one
    if (p % 3 != 0) keys.push_back(91);  // larger ones this one too
    if (p % 5 == 1) keys.push_back(92);
  }
  const uint64_t n = keys.size();
  std::vector<uint64_t> begins(n), ends(n), kept(n), table(4 * 1024);
  for (uint64_t i = 0; i < n; ++i) {
    begins[i] = 2 * i;
    ends[i] = 2 * i + 1;
    kept[i] = 1000 + i;
  }
  // The exact search finds nothing: the responses' requests recur, irregularly.
  std::vector<uint64_t> scratch(2 * n + 2);
  PeriodQuery query;
  query.min_run = 64;
  EXPECT_FALSE(
      find_period(keys.data(), begins.data(), ends.data(), n, query, scratch.data()).found);
  std::vector<uint64_t> k = keys, b = begins, e = ends, idx = kept;
  uint64_t dropped[4];
  int dropped_count = 0;
  const uint64_t m = keep_regular(k.data(), b.data(), e.data(), idx.data(), n, /*anchor=*/1,
                                  /*intervals=*/32, table.data(), 1024, dropped, 4, &dropped_count);
  ASSERT_GT(m, 32u * 6);
  ASSERT_EQ(dropped_count, 2);
  EXPECT_EQ(std::min(dropped[0], dropped[1]), 91u);
  EXPECT_EQ(std::max(dropped[0], dropped[1]), 92u);
  for (uint64_t i = 0; i < m; ++i) {
    EXPECT_NE(k[i], 91u);
    EXPECT_NE(k[i], 92u);
    EXPECT_EQ(keys[idx[i] - 1000], k[i]) << "kept records keep their original index";
    EXPECT_EQ(begins[idx[i] - 1000], b[i]);
    if (i) {
      EXPECT_GT(idx[i], idx[i - 1]);
    }
  }
  const PeriodResult r = find_period(k.data(), b.data(), e.data(), m, query, scratch.data());
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 6u) << "the pass and its one regular response request";
  // Anchored on an irregular key, or with too few occurrences: nothing.
  k = keys, b = begins, e = ends, idx = kept;
  EXPECT_EQ(keep_regular(k.data(), b.data(), e.data(), idx.data(), n, 92, 32, table.data(), 1024,
                         dropped, 4, &dropped_count),
            0u);
}

// counts_repeat: a key's misses per replayed pass. A pass's head under a plan of one of its
// layers repeats with the number of layers; a one-off, nothing, and counts drawn at random do not.
TEST(CountsRepeat, TellsAPassesHeadFromIrregularWork) {
  constexpr uint32_t kN = 64;
  uint8_t counts[kN] = {};
  EXPECT_FALSE(counts_repeat(counts, kN)) << "never missed";
  for (uint32_t i = 0; i < kN; ++i) {
    counts[i] = 1;
    EXPECT_FALSE(counts_repeat(counts, kN)) << "missed once, in pass " << i;
    counts[i] = 0;
  }
  for (uint32_t layers : {1u, 4u, 12u, 32u}) {
    for (uint32_t phase = 0; phase < layers; ++phase) {
      for (uint32_t i = 0; i < kN; ++i) counts[i] = (i + phase) % layers == 0;
      EXPECT_TRUE(counts_repeat(counts, kN)) << layers << " layers, phase " << phase;
    }
  }
  for (uint32_t i = 0; i < kN; ++i) counts[i] = 2;
  EXPECT_TRUE(counts_repeat(counts, kN)) << "missed twice every pass";
  // A response's size drawn per request: one to three requests of doubling sizes, so the largest
  // size is missed in some passes only.
  std::minstd_rand random(11);
  int repeating = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    for (uint32_t i = 0; i < kN; ++i) counts[i] = random() % 3 == 2;
    repeating += counts_repeat(counts, kN);
  }
  EXPECT_EQ(repeating, 0);
  // Response sizes drifting slowly: runs of passes that miss the key, then runs that do not.
  // Even where such a pattern repeats within the window, it misses in more than one pass a period.
  for (uint32_t i = 0; i < kN; ++i) counts[i] = i % 25 < 10;
  EXPECT_FALSE(counts_repeat(counts, kN)) << "runs of 10 in 25";
  for (uint32_t i = 0; i < kN; ++i) counts[i] = i % 16 < 3;
  EXPECT_FALSE(counts_repeat(counts, kN)) << "runs of 3 in 16, periodic in the window";
  // The last pass of a repeating pattern broken: no longer repeats.
  for (uint32_t i = 0; i < kN; ++i) counts[i] = i % 4 == 0;
  counts[kN - 1] = 1;
  EXPECT_FALSE(counts_repeat(counts, kN));
}

// keep_recurring drops the records whose key occurs once and keeps the rest in order, with their
// original indices.
TEST(KeepRecurring, DropsKeysMadeOnceAndKeepsOrder) {
  std::vector<uint64_t> keys = {5, 9, 5, 7, 9, 8, 5, 0, 0};
  std::vector<uint64_t> begins, ends;
  for (uint64_t i = 0; i < keys.size(); ++i) {
    begins.push_back(10 * i);
    ends.push_back(10 * i + 1);
  }
  std::vector<uint64_t> kept(keys.size()), table(2 * 32);
  const uint64_t m = keep_recurring(keys.data(), begins.data(), ends.data(), keys.size(),
                                    kept.data(), table.data(), 32);
  ASSERT_EQ(m, 7u);
  EXPECT_EQ(std::vector<uint64_t>(keys.begin(), keys.begin() + m),
            (std::vector<uint64_t>{5, 9, 5, 9, 5, 0, 0}));
  EXPECT_EQ(std::vector<uint64_t>(kept.begin(), kept.begin() + m),
            (std::vector<uint64_t>{0, 1, 2, 4, 6, 7, 8}));
  EXPECT_EQ(begins[3], 40u);  // the second 9
  EXPECT_EQ(ends[5], 71u);    // the first 0
}

// Between passes the program makes one request of a new size every pass: with the one-off
// requests left out, the pass period is found; with them in, nothing is periodic.
TEST(KeepRecurring, OneOffRequestsBetweenPassesNoLongerHideThePeriod) {
  History h;
  uint64_t tick = 0;
  for (uint64_t pass = 0; pass < 6; ++pass) {
    for (uint64_t key : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}, 1000 + pass}) {
      h.keys.push_back(key);
      h.begins.push_back(tick++);
      h.ends.push_back(tick++);
    }
  }
  EXPECT_FALSE(search(h).found);
  std::vector<uint64_t> kept(h.keys.size()), table(2 * 64);
  const uint64_t m = keep_recurring(h.keys.data(), h.begins.data(), h.ends.data(), h.keys.size(),
                                    kept.data(), table.data(), 64);
  EXPECT_EQ(m, 24u);
  h.keys.resize(m);
  h.begins.resize(m);
  h.ends.resize(m);
  const PeriodResult r = search(h);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.period, 4u);
}

}  // namespace
}  // namespace memoplan::shim

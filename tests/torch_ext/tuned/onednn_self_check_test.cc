// onednn::self_check: oneDNN's results in the layouts memoplan asks for against double-precision
// loops, run once by block_size(), which turns oneDNN's kernels off where it fails. Here: the
// check agrees with block_size() on this machine, and a wrong result in any one of its cases
// (each result altered in turn, as a library bug would) is caught and named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>

#include "memoplan/onednn/onednn.h"

namespace memoplan::onednn {
namespace {

TEST(OneDnnSelfCheck, BlockSizeIsZeroExactlyWhereTheCheckFails) {
  const std::string failure = self_check();
  if (!failure.empty()) {
    std::printf("oneDNN fails its self-check here: %s\n", failure.c_str());
    EXPECT_EQ(block_size(), 0) << failure;
  } else if (block_size() == 0) {
    GTEST_SKIP() << "no oneDNN kernels for this CPU (" << describe() << ")";
  }
  EXPECT_NE(describe().find(failure), std::string::npos) << describe();
}

TEST(OneDnnSelfCheck, AWrongValueInAnyCaseIsCaughtAndNamed) {
  if (block_size() == 0) GTEST_SKIP() << describe();
  // How many results the check compares: each call of `corrupt` is one.
  int results = 0;
  EXPECT_EQ(self_check([&](float*, size_t) { ++results; }), "");
  ASSERT_GE(results, 12);
  std::set<std::string> named;
  for (int wrong = 0; wrong < results; ++wrong) {
    int call = 0;
    const std::string failure = self_check([&](float* values, size_t count) {
      if (call++ != wrong) return;
      for (size_t i = 0; i < count; ++i) values[i] += 0.01f * (1 + std::abs(values[i]));
    });
    EXPECT_NE(failure, "") << "result " << wrong << " was altered, yet the check passed";
    named.insert(failure.substr(0, failure.find(": element")));
  }
  EXPECT_EQ(named.size(), static_cast<size_t>(results));  // each case says which it is
  const std::string nan = self_check(
      [](float* values, size_t) { values[0] = std::numeric_limits<float>::quiet_NaN(); });
  EXPECT_NE(nan.find("is nan"), std::string::npos) << nan;
}

}  // namespace
}  // namespace memoplan::onednn

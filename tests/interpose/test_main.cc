// interpose_tests' main. The engine reads MEMOPLAN_CONF once, at its first call, so the options
// must be settled before any test runs: the defaults, unless MEMOPLAN_TEST_CONF names others (CTest
// runs the engine tests a second time with detect:false). A MEMOPLAN_CONF left in the caller's
// shell never leaks in.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  const char* test_conf = getenv("MEMOPLAN_TEST_CONF");
  if (test_conf && *test_conf) {
    setenv("MEMOPLAN_CONF", test_conf, /*overwrite=*/1);
  } else {
    unsetenv("MEMOPLAN_CONF");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

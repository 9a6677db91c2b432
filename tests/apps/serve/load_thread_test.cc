// LoadThread (apps/serve/load_thread.h): every job runs on its one thread, in order, the caller
// waits for it and gets its exception; a job that calls run() runs the inner job at once.
#include "load_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace memoplan::serve {
namespace {

TEST(LoadThread, RunsEveryJobOnOneThreadOtherThanTheCallers) {
  LoadThread loader;
  std::thread::id first, second;
  loader.run([&] { first = std::this_thread::get_id(); });
  loader.run([&] { second = std::this_thread::get_id(); });
  EXPECT_EQ(first, second);
  EXPECT_NE(first, std::this_thread::get_id());
  EXPECT_FALSE(loader.on_thread());
}

TEST(LoadThread, TheCallerWaitsForItsJobAndGetsItsException) {
  LoadThread loader;
  int done = 0;
  loader.run([&] { ++done; });
  EXPECT_EQ(done, 1);  // returned after the job, not before
  EXPECT_THROW(loader.run([] { throw std::runtime_error("no such file"); }), std::runtime_error);
  loader.run([&] { ++done; });  // still serving after a job threw
  EXPECT_EQ(done, 2);
}

TEST(LoadThread, AJobThatRunsAnotherRunsItAtOnce) {
  LoadThread loader;
  bool inner_on_thread = false;
  loader.run([&] { loader.run([&] { inner_on_thread = loader.on_thread(); }); });
  EXPECT_TRUE(inner_on_thread);
}

TEST(LoadThread, JobsFromManyThreadsRunOneAtATime) {
  LoadThread loader;
  std::atomic<int> inside{0}, most{0}, runs{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        loader.run([&] {
          const int now = ++inside;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          ++runs;
          --inside;
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(runs.load(), 400);
  EXPECT_EQ(most.load(), 1);
}

}  // namespace
}  // namespace memoplan::serve

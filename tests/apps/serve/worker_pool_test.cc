// The bounded queue of memoplan-serve's workers: admission (workers + capacity at once, then
// refusals), finish() after the worker is idle again, stop() running what was queued, and many
// submitters at once.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "worker_pool.h"

namespace memoplan::serve {
namespace {

WorkerPool::Job job(std::function<void()> run, std::function<void()> finish = {}) {
  return WorkerPool::Job{std::move(run), std::move(finish)};
}

TEST(WorkerPool, AdmitsWorkersPlusCapacityThenRefuses) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  WorkerPool pool(1, 1, nullptr);
  auto blocking = [&] {
    released.wait();
    ++ran;
  };
  ASSERT_TRUE(pool.try_submit(job(blocking)));
  while (pool.busy() != 1) std::this_thread::yield();
  EXPECT_TRUE(pool.try_submit(job(blocking)));  // waits in the queue
  EXPECT_EQ(pool.depth(), 1u);
  EXPECT_FALSE(pool.try_submit(job(blocking)));  // full: the caller answers 503
  release.set_value();
  pool.stop();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(pool.try_submit(job([] {})));  // stopped
}

TEST(WorkerPool, ZeroCapacityStillTakesAJobPerIdleWorker) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  WorkerPool pool(2, 0, nullptr);
  EXPECT_TRUE(pool.try_submit(job([&] { released.wait(); })));
  EXPECT_TRUE(pool.try_submit(job([&] { released.wait(); })));
  EXPECT_FALSE(pool.try_submit(job([] {})));
  release.set_value();
}

TEST(WorkerPool, FinishRunsOnceTheWorkerIsIdle) {
  WorkerPool pool(1, 0, nullptr);
  std::promise<int> busy_at_finish;
  ASSERT_TRUE(pool.try_submit(job([] {}, [&] { busy_at_finish.set_value(pool.busy()); })));
  EXPECT_EQ(busy_at_finish.get_future().get(), 0);
}

TEST(WorkerPool, ThreadInitRunsOnEveryWorkerBeforeTheConstructorReturns) {
  std::atomic<int> initialized{0};
  WorkerPool pool(3, 0, [&](int) { ++initialized; });
  EXPECT_EQ(initialized.load(), 3);
}

TEST(WorkerPool, ManySubmittersEveryAcceptedJobRunsOnce) {
  std::atomic<int> accepted{0}, ran{0}, finished{0};
  {
    WorkerPool pool(3, 8, nullptr);
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t) {
      submitters.emplace_back([&] {
        for (int i = 0; i < 500; ++i) {
          if (pool.try_submit(job([&] { ++ran; }, [&] { ++finished; }))) ++accepted;
        }
      });
    }
    for (std::thread& t : submitters) t.join();
  }  // the destructor stops the pool after the queued jobs
  EXPECT_GT(accepted.load(), 0);
  EXPECT_EQ(ran.load(), accepted.load());
  EXPECT_EQ(finished.load(), accepted.load());
}

}  // namespace
}  // namespace memoplan::serve

// Dynamic batching (apps/serve/batcher.h) with a fake forward on a real WorkerPool: requests
// stack into one call while the worker is busy, outputs split back by rows, a batch that fails
// runs again request by request, outputs not per row run alone, the preferred size and the delay,
// and 503 when too many wait.
#include "batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "http_error.h"

namespace memoplan::serve {
namespace {

HostTensor rows_of(std::initializer_list<float> values, int64_t columns = 1) {
  HostTensor t{"x", DataType::kFp32, {static_cast<int64_t>(values.size()) / columns, columns}, {}};
  t.bytes.resize(values.size() * sizeof(float));
  std::memcpy(t.bytes.data(), values.begin(), t.bytes.size());
  return t;
}

std::vector<float> values_of(const HostTensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

TEST(BatchRows, KeysStackAndSplit) {
  int64_t rows = 0;
  const std::string a = batch_key({rows_of({1, 2, 3, 4}, 2)}, &rows);
  EXPECT_EQ(rows, 2);
  const std::string b = batch_key({rows_of({5, 6}, 2)}, &rows);
  EXPECT_EQ(rows, 1);
  EXPECT_EQ(a, b) << "the same but for dimension 0";
  EXPECT_NE(a, batch_key({rows_of({1, 2, 3}, 3)}, &rows));
  HostTensor scalar{"s", DataType::kFp32, {}, std::string(4, '\0')};
  EXPECT_EQ(batch_key({scalar}, &rows), "");
  EXPECT_EQ(rows, 0);
  EXPECT_EQ(batch_key({rows_of({1, 2}), rows_of({1, 2, 3})}, &rows), "") << "unequal batch";

  const std::vector<HostTensor> r1 = {rows_of({1, 2, 3, 4}, 2)}, r2 = {rows_of({5, 6}, 2)};
  const std::vector<HostTensor> stacked = stack_rows({&r1, &r2});
  EXPECT_EQ(stacked[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values_of(stacked[0]), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  std::vector<std::vector<HostTensor>> parts;
  ASSERT_TRUE(split_rows(stacked, {2, 1}, &parts));
  EXPECT_EQ(values_of(parts[0][0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(parts[1][0].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values_of(parts[1][0]), (std::vector<float>{5, 6}));
  EXPECT_FALSE(split_rows({rows_of({1, 2})}, {2, 1}, &parts)) << "not one row per input row";
}

// Waits (up to 30 s: sanitizer builds are slow) until `n` requests wait in the batcher.
void wait_pending(const Batcher& batcher, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (batcher.pending() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(batcher.pending(), n);
}

// A worker held busy by a job that waits for `release`, so that requests pile up.
struct HeldPool {
  WorkerPool pool{1, 16, nullptr};
  std::promise<void> release;
  HeldPool() {
    std::shared_future<void> go = release.get_future().share();
    std::promise<void> started;
    std::future<void> running = started.get_future();
    auto started_ptr = std::make_shared<std::promise<void>>(std::move(started));
    EXPECT_TRUE(pool.try_submit({[go, started_ptr] {
                                   started_ptr->set_value();
                                   go.wait();
                                 },
                                 nullptr}));
    running.wait();
  }
};

// Doubles every value; counts calls and the rows of each.
struct Doubler {
  std::atomic<int> calls{0};
  std::vector<int64_t> rows;
  std::mutex mutex;
  std::vector<HostTensor> operator()(const std::vector<HostTensor>& in) {
    ++calls;
    {
      std::lock_guard<std::mutex> lock(mutex);
      rows.push_back(in[0].shape[0]);
    }
    HostTensor out = in[0];
    out.name = "output__0";
    std::vector<float> v = values_of(out);
    for (float& f : v) {
      if (f < 0) throw HttpError(400, "negative input");
      f *= 2;
    }
    std::memcpy(out.bytes.data(), v.data(), out.bytes.size());
    return {out};
  }
};

TEST(Batcher, StacksRequestsWhileTheWorkerIsBusy) {
  HeldPool held;
  Metrics metrics;
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 8;
  Batcher batcher(options, held.pool, metrics,
                  [&](const std::vector<HostTensor>& in) { return doubler(in); });
  std::vector<std::future<std::vector<HostTensor>>> results;
  for (int k = 0; k < 6; ++k) {
    results.push_back(std::async(std::launch::async, [&, k] {
      return batcher.infer({rows_of({static_cast<float>(k), static_cast<float>(10 + k)}, 2)});
    }));
  }
  wait_pending(batcher, 6);  // all six wait for the worker
  held.release.set_value();
  for (int k = 0; k < 6; ++k) {
    const std::vector<HostTensor> out = results[k].get();
    EXPECT_EQ(out[0].shape, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(values_of(out[0]), (std::vector<float>{2.0f * k, 2.0f * (10 + k)}));
  }
  EXPECT_EQ(doubler.calls.load(), 1) << "one forward call for the six";
  EXPECT_EQ(doubler.rows, (std::vector<int64_t>{6}));
  const std::string text = metrics.render({}, {});
  EXPECT_NE(
      text.find("memoplan_batch_size_bucket{le=\"4\"} 0\nmemoplan_batch_size_bucket{le=\"8\"} 1"),
      std::string::npos)
      << text;
}

TEST(Batcher, AFailingBatchRunsRequestByRequest) {
  HeldPool held;
  Metrics metrics;
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 4;
  Batcher batcher(options, held.pool, metrics,
                  [&](const std::vector<HostTensor>& in) { return doubler(in); });
  auto good = std::async(std::launch::async, [&] { return batcher.infer({rows_of({1})}); });
  auto bad = std::async(std::launch::async, [&] { return batcher.infer({rows_of({-1})}); });
  auto other = std::async(std::launch::async, [&] { return batcher.infer({rows_of({3})}); });
  wait_pending(batcher, 3);
  held.release.set_value();
  EXPECT_EQ(values_of(good.get()[0]), (std::vector<float>{2}));
  EXPECT_EQ(values_of(other.get()[0]), (std::vector<float>{6}));
  try {
    bad.get();
    ADD_FAILURE() << "the bad request succeeded";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
  }
  EXPECT_EQ(doubler.calls.load(), 4) << "the batch of three, then each alone";
}

TEST(Batcher, MaxBatchSizeAndIncompatibleShapes) {
  HeldPool held;
  Metrics metrics;
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 3;
  Batcher batcher(options, held.pool, metrics,
                  [&](const std::vector<HostTensor>& in) { return doubler(in); });
  std::vector<std::future<std::vector<HostTensor>>> results;
  for (int k = 0; k < 5; ++k) {
    results.push_back(std::async(std::launch::async, [&, k] {
      return k == 4 ? batcher.infer({rows_of({1, 2, 3}, 3)})  // another shape: its own batch
                    : batcher.infer({rows_of({static_cast<float>(k)})});
    }));
    wait_pending(batcher, static_cast<size_t>(k) + 1);  // arrival order
  }
  held.release.set_value();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(values_of(results[k].get()[0])[0], 2.0f * k);
  EXPECT_EQ(values_of(results[4].get()[0]), (std::vector<float>{2, 4, 6}));
  std::sort(doubler.rows.begin(), doubler.rows.end());
  EXPECT_EQ(doubler.rows, (std::vector<int64_t>{1, 1, 3})) << "3 + 1 rows, and the other shape";
}

TEST(Batcher, WaitsForThePreferredSizeOrTheDelay) {
  WorkerPool pool(1, 16, nullptr);
  Metrics metrics;
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 8;
  options.preferred_batch_sizes = {2};
  options.max_queue_delay = std::chrono::microseconds(400'000);
  Batcher batcher(options, pool, metrics,
                  [&](const std::vector<HostTensor>& in) { return doubler(in); });
  // Two at once: the preferred size goes at once, long before the delay.
  const auto start = std::chrono::steady_clock::now();
  auto a = std::async(std::launch::async, [&] { return batcher.infer({rows_of({1})}); });
  auto b = std::async(std::launch::async, [&] { return batcher.infer({rows_of({2})}); });
  a.get();
  b.get();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(390));
  EXPECT_EQ(doubler.rows, (std::vector<int64_t>{2}));
  // One alone waits for the delay, then goes.
  const auto single = std::chrono::steady_clock::now();
  batcher.infer({rows_of({3})});
  EXPECT_GE(std::chrono::steady_clock::now() - single, std::chrono::milliseconds(390));
}

TEST(Batcher, TooManyWaitingAreRefused) {
  HeldPool held;
  Metrics metrics;
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 2;
  options.max_pending = 2;
  Batcher batcher(options, held.pool, metrics,
                  [&](const std::vector<HostTensor>& in) { return doubler(in); });
  auto a = std::async(std::launch::async, [&] { return batcher.infer({rows_of({1})}); });
  auto b = std::async(std::launch::async, [&] { return batcher.infer({rows_of({2})}); });
  wait_pending(batcher, 2);
  try {
    batcher.infer({rows_of({3})});
    ADD_FAILURE() << "a third waiting request was taken";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 503);
  }
  held.release.set_value();
  EXPECT_EQ(values_of(a.get()[0]), (std::vector<float>{2}));
  EXPECT_EQ(values_of(b.get()[0]), (std::vector<float>{4}));
}

}  // namespace
}  // namespace memoplan::serve

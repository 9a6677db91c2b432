// The inference workers and their bounded queue. HTTP threads submit a job and wait for it; when
// the workers are busy and `capacity` jobs already wait, try_submit refuses (the route answers
// 503) instead of letting the queue, and the latency of everything in it, grow without limit.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace memoplan::serve {

class WorkerPool {
 public:
  struct Job {
    std::function<void()> run;  // on a worker; must not throw
    // Then, once the worker counts as idle again: answers the client. In that order, a client
    // that sends its next request as soon as it has the answer finds the worker free, never a
    // 503 from a worker that was about to be.
    std::function<void()> finish;
  };

  // Starts `workers` threads; each runs `thread_init(index)` once before its first job (the model
  // sets the thread's intra-op parallelism there), and the constructor returns when all have. At
  // most workers + capacity jobs are accepted at once: the running ones and `capacity` waiting.
  WorkerPool(int workers, size_t capacity, std::function<void(int)> thread_init);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False when the queue is full or the pool is stopping; the job is then not run.
  bool try_submit(Job job);
  // Runs what is queued, then joins the workers. Idempotent.
  void stop();

  // Called on a worker each time it has finished a job and counts as idle (after the job's
  // finish), outside the pool's lock: the batcher forms its next batch then. Null: none. Once
  // set_on_idle returns, no call of the function it replaced is running.
  void set_on_idle(std::function<void()> on_idle);

  size_t depth() const;  // jobs waiting for a worker
  int busy() const;      // jobs running
  int workers() const { return static_cast<int>(threads_.size()); }
  size_t capacity() const { return capacity_; }

 private:
  void run(int index, const std::function<void(int)>& thread_init);

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  int busy_ = 0;
  int initialized_ = 0;
  bool stopping_ = false;
  std::mutex on_idle_mutex_;  // held while on_idle_ runs or changes
  std::function<void()> on_idle_;
  std::vector<std::thread> threads_;
};

}  // namespace memoplan::serve

#include "worker_pool.h"

namespace memoplan::serve {

WorkerPool::WorkerPool(int workers, size_t capacity, std::function<void(int)> thread_init)
    : capacity_(capacity) {
  for (int i = 0; i < workers; ++i) {
    threads_.emplace_back([this, i, thread_init] { run(i, thread_init); });
  }
  // Returns once every worker has run thread_init: nothing else runs meanwhile (see main.cc).
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return initialized_ == workers; });
}

WorkerPool::~WorkerPool() { stop(); }

bool WorkerPool::try_submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Idle workers take jobs at once, so they do not count against the waiting capacity.
    const size_t idle = threads_.size() - static_cast<size_t>(busy_);
    if (stopping_ || queue_.size() >= capacity_ + idle) return false;
    queue_.push_back(std::move(job));
  }
  ready_.notify_one();
  return true;
}

void WorkerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::set_on_idle(std::function<void()> on_idle) {
  std::lock_guard<std::mutex> lock(on_idle_mutex_);  // no call of the old one is running after
  on_idle_ = std::move(on_idle);
}

size_t WorkerPool::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

int WorkerPool::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_;
}

void WorkerPool::run(int index, const std::function<void(int)>& thread_init) {
  if (thread_init) thread_init(index);
  std::unique_lock<std::mutex> lock(mutex_);
  ++initialized_;
  ready_.notify_all();
  for (;;) {
    ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    Job job = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    try {
      job.run();
    } catch (...) {
      // Jobs report their errors through their promise; one that throws anyway must not take
      // the worker (and with it the process, through std::terminate) down.
    }
    lock.lock();
    --busy_;
    lock.unlock();
    if (job.finish) job.finish();
    job = Job{};  // its inputs and outputs are freed outside the lock
    {
      std::lock_guard<std::mutex> idle(on_idle_mutex_);
      if (on_idle_) on_idle_();
    }
    lock.lock();
  }
}

}  // namespace memoplan::serve

#include "load_thread.h"

#include <future>
#include <memory>

namespace memoplan::serve {

LoadThread::LoadThread() : thread_([this] { loop(); }) {}

LoadThread::~LoadThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void LoadThread::run(const std::function<void()>& job) {
  if (on_thread()) return job();
  // Shared with the queued call: the thread may still be inside it when get() returns here.
  auto task = std::make_shared<std::packaged_task<void()>>(job);
  std::future<void> done = task->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back([task] { (*task)(); });
  }
  wake_.notify_one();
  done.get();  // rethrows the job's exception
}

void LoadThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();  // a packaged_task: never throws
    lock.lock();
  }
}

}  // namespace memoplan::serve

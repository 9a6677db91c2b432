// The one thread that loads, plans and frees the repository's models. A load on whichever HTTP
// handler thread took the call left that thread's malloc arena (glibc) or thread cache (tcmalloc)
// holding the small blocks a load frees, a different one each time: with 64 handler threads a
// server's VmRSS rose ~0.3 MiB with each of its first 30-40 load/unload cycles of a model, "plan":
// false too (docs/SERVE.md, "Memory"). On one thread every load reuses what the last one freed.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace memoplan::serve {

class LoadThread {
 public:
  LoadThread();
  ~LoadThread();  // runs what was queued, then joins
  LoadThread(const LoadThread&) = delete;
  LoadThread& operator=(const LoadThread&) = delete;

  // Runs `job` on the thread, after the jobs queued before it, and returns when it has: rethrows
  // what it threw. Called on the thread itself, runs it at once.
  void run(const std::function<void()>& job);
  bool on_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace memoplan::serve

// A progress line on stderr for the phases of `memoplan run` that can take more than a second
// (loading, planning, warm-up, measuring). On a terminal: a bar (or, with no known total, the
// elapsed time) redrawn in place by a ticker thread, shown only once the phase has run a second,
// erased when it ends. Otherwise (a log, a pipe): one plain line per phase that took more than a
// second, when it ends. stdout is never touched: --json output stays one clean object.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace memoplan::run {

// Milliseconds on the steady clock since `start`: how each phase and pass is timed.
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

class Progress {
 public:
  // total 0: unknown (elapsed time only). enabled false: silent.
  Progress(std::string label, uint64_t total, bool enabled);
  ~Progress();  // finishes
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(uint64_t steps = 1) { done_.fetch_add(steps, std::memory_order_relaxed); }
  void finish();

 private:
  void tick();
  void draw(bool final_line);
  double elapsed_s() const;

  const std::string label_;
  const uint64_t total_;
  const bool enabled_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool finished_ = false;
  bool drawn_ = false;
  std::thread ticker_;
};

}  // namespace memoplan::run

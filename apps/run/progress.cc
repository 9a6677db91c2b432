#include "progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace memoplan::run {
namespace {

constexpr double kShowAfterS = 1.0;  // quicker phases print nothing
constexpr auto kRedraw = std::chrono::milliseconds(100);
constexpr int kBarWidth = 30;

}  // namespace

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(enabled && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {
  if (tty_) ticker_ = std::thread([this] { tick(); });
}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kRedraw, [this] { return finished_; })) {
    if (elapsed_s() >= kShowAfterS) draw(false);
  }
}

void Progress::draw(bool final_line) {
  const uint64_t done = done_.load(std::memory_order_relaxed);
  std::string line = fmt::format("memoplan run: {}", label_);
  if (total_) {
    const int filled = static_cast<int>(kBarWidth * std::min(done, total_) / total_);
    line += fmt::format(" [{}{}] {}/{}", std::string(filled, '#'),
                        std::string(kBarWidth - filled, '.'), done, total_);
  }
  line += fmt::format(" {:.1f} s", elapsed_s());
  if (tty_) {
    // \r and erase-to-end: the line is redrawn in place and left empty at the end.
    fmt::print(stderr, "\r{}\033[K", final_line ? "" : line);
    drawn_ = !final_line;
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    finished_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (tty_) {
    if (drawn_) draw(true);
  } else if (elapsed_s() >= kShowAfterS) {
    draw(false);
  }
}

}  // namespace memoplan::run

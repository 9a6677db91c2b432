// stats_file and stats_interval_ms: the statistics as JSON (stats_json) in a file that readers may
// open at any moment: each write goes to PATH.tmp and is renamed over PATH, so a reader sees the
// previous version or the next one, whole. A thread of its own rewrites it every interval; the
// library's destructor writes it a last time at exit ("at_exit":true). The thread is made the way
// the idle-slab reaper is (spawn_background_thread: every signal blocked, a small stack, detached),
// from the library's constructor rather than from inside malloc; it never allocates (the JSON is
// formatted in a static buffer, or in pages of its own when larger), and holds the reentry guard
// so that anything it calls that does allocate goes straight to the fallback.
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

enum : int { kNotStarted, kRunning, kUnavailable };
std::atomic<int> writer_state{kNotStarted};
// One write at a time (the thread's and the one at exit share PATH.tmp). A spin lock: a fork child
// clears it (the thread that may have held it did not come along).
std::atomic_flag file_lock = ATOMIC_FLAG_INIT;
bool finished = false;          // under file_lock: the write at exit is done; no other follows
bool failure_logged = false;    // under file_lock
bool parent_owns_file = false;  // a fork child whose path has no %p: the file is the parent's

class FileLock {
 public:
  FileLock() {
    while (file_lock.test_and_set(std::memory_order_acquire)) {
      const timespec pause{0, 100000};
      nanosleep(&pause, nullptr);
    }
  }
  ~FileLock() { file_lock.clear(std::memory_order_release); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
};

// %p: the process id, %%: a percent sign; other characters as they are. False when the path and
// ".tmp" do not fit in `size`.
bool expand_path(const char* pattern, char* out, size_t size) {
  size_t n = 0;
  char pid[24];
  const int pid_length = snprintf(pid, sizeof pid, "%d", static_cast<int>(getpid()));
  for (const char* c = pattern; *c; ++c) {
    const char* piece = c;
    size_t length = 1;
    if (c[0] == '%' && c[1] == 'p') {
      piece = pid;
      length = static_cast<size_t>(pid_length);
      ++c;
    } else if (c[0] == '%' && c[1] == '%') {
      ++c;
    }
    if (n + length + sizeof ".tmp" > size) return false;
    memcpy(out + n, piece, length);
    n += length;
  }
  out[n] = '\0';
  return n > 0;
}

bool write_all(int fd, const char* text, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, text, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The JSON and a newline, to `path`.tmp and renamed to `path`. Returns 0 or an errno value.
int write_json(const char* path, const char* text, size_t size) {
  char tmp[kPathCapacity + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  const bool written = write_all(fd, text, size);
  int error = written ? 0 : errno ? errno : EIO;
  if (close(fd) != 0 && !error) error = errno;
  if (!error && rename(tmp, path) != 0) error = errno;
  if (error) unlink(tmp);
  return error;
}

void* writer_main(void*) {
  ReentryGuard guard;  // nothing here allocates; if a libc call does, the fallback serves it
  const uint64_t interval_ns = global().options.stats_interval_ms * 1000000ull;
  timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (;;) {
    write_stats_file(global().options.stats_file, /*at_exit=*/false);
    // The next write one interval after this one was due (no drift); after a stall, one interval
    // from now.
    const uint64_t due = static_cast<uint64_t>(next.tv_sec) * 1000000000ull +
                         static_cast<uint64_t>(next.tv_nsec) + interval_ns;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const uint64_t now_ns =
        static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
    const uint64_t at = due > now_ns ? due : now_ns + interval_ns;
    next.tv_sec = static_cast<time_t>(at / 1000000000ull);
    next.tv_nsec = static_cast<long>(at % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
    }
  }
  return nullptr;
}

}  // namespace

bool write_stats_file(const char* pattern, bool at_exit) {
  FileLock lock;
  if (finished || parent_owns_file) return false;
  if (at_exit) finished = true;
  char path[kPathCapacity + 32];
  if (!expand_path(pattern, path, sizeof path)) {
    if (!failure_logged) log_line("memoplan: stats_file %s: the path is too long", pattern);
    failure_logged = true;
    return false;
  }
  // The JSON in a static buffer (the writer thread's stack is small); when larger (long paths in
  // the options), in pages of its own, as large as stats_json says it needs (figures may grow
  // between two calls: then again).
  static char buffer[16384];  // under file_lock
  char* text = buffer;
  size_t capacity = sizeof buffer;
  size_t mapped = 0;
  size_t size = 0;
  for (;;) {
    size = stats_json(text, capacity, at_exit);
    if (size + 1 < capacity) break;  // room for the newline
    if (mapped) munmap(text, mapped);
    mapped = (size + 2 + 4096 + 4095) & ~size_t{4095};
    void* pages = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) {
      if (!failure_logged) log_line("memoplan: stats_file %s: out of memory", path);
      failure_logged = true;
      return false;
    }
    text = static_cast<char*>(pages);
    capacity = mapped;
  }
  text[size++] = '\n';
  const int error = write_json(path, text, size);
  if (mapped) munmap(text, mapped);
  if (error && !failure_logged) {
    log_line("memoplan: cannot write the statistics to %s: %s", path, strerror(error));
    failure_logged = true;
  }
  return error == 0;
}

void start_stats_writer() {
  if (writer_state.load(std::memory_order_relaxed) != kNotStarted) return;
  const Options& o = global().options;
  if (!o.stats_file[0] || o.stats_interval_ms == 0) return;
  int expected = kNotStarted;
  if (!writer_state.compare_exchange_strong(expected, kRunning)) return;
  const int rc = spawn_background_thread(&writer_main, "memoplan-stats");
  if (rc != 0) {
    writer_state.store(kUnavailable);
    log_line("memoplan: cannot start the statistics writer (%s): %s is written at exit only",
             strerror(rc), o.stats_file);
  }
}

void stats_file_after_fork_in_child() {
  file_lock.clear(std::memory_order_relaxed);
  if (!global().options.stats_file[0]) return;
  if (!strstr(global().options.stats_file, "%p")) {
    parent_owns_file = true;  // no write, ever: the parent's file stays the parent's
    return;
  }
  failure_logged = false;
  if (writer_state.load(std::memory_order_relaxed) == kRunning) {
    writer_state.store(kNotStarted, std::memory_order_relaxed);
  }
}

void write_stats_file_at_exit() {
  if (!global().options.stats_file[0]) return;
  ReentryGuard guard;
  write_stats_file(global().options.stats_file, /*at_exit=*/true);
}

}  // namespace memoplan::shim

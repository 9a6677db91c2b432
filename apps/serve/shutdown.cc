#include "shutdown.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <stdexcept>

namespace memoplan::serve {
namespace {

int g_pipe[2] = {-1, -1};  // [0]: the watcher reads, [1]: the handler writes

void on_signal(int signal) {
  const int saved = errno;  // the interrupted thread may be about to read it
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t n = write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void install_shutdown_handlers() {
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe2 failed");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the interrupted thread's system call resumes
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

ShutdownWatcher::ShutdownWatcher(std::function<void(int)> on_signal)
    : thread_([this, on_signal = std::move(on_signal)] {
        pollfd fd{g_pipe[0], POLLIN, 0};
        // A timeout rather than an endless wait: the destructor can end the thread without
        // writing to the pipe.
        while (!done_.load()) {
          if (poll(&fd, 1, 100) <= 0) continue;
          unsigned char byte = 0;
          if (read(g_pipe[0], &byte, 1) == 1) {
            // A second signal takes the default action: ends the process at once, for when
            // the requests in flight take too long.
            std::signal(SIGTERM, SIG_DFL);
            std::signal(SIGINT, SIG_DFL);
            on_signal(byte);
            return;
          }
        }
      }) {}

ShutdownWatcher::~ShutdownWatcher() {
  done_.store(true);
  thread_.join();
}

}  // namespace memoplan::serve

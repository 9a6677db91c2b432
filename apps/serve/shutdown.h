// Graceful shutdown on SIGTERM (what Kubernetes and docker stop send) and SIGINT (Ctrl-C). The
// signal handler only writes the signal's number to a pipe (async-signal-safe); a watcher thread
// reads it and runs the action as ordinary code (it may lock, allocate, join). A handler rather
// than a blocked mask and sigwait: libraries start threads before main (LibTorch does), and any
// thread with the signals unblocked would take the default action, killing the process.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace memoplan::serve {

// Installs the handlers; call once, early in main. A signal that arrives before a watcher starts
// waits in the pipe for it.
void install_shutdown_handlers();

class ShutdownWatcher {
 public:
  // Calls on_signal(signal number) on the watcher thread at the first SIGTERM or SIGINT; a
  // second one then ends the process at once (the default action).
  explicit ShutdownWatcher(std::function<void(int)> on_signal);
  ~ShutdownWatcher();  // stops watching; joins
  ShutdownWatcher(const ShutdownWatcher&) = delete;
  ShutdownWatcher& operator=(const ShutdownWatcher&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace memoplan::serve

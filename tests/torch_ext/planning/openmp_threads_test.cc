// release_openmp_threads(): the calling thread's OpenMP workers exit, and its next parallel region
// makes them again (plan() calls it last: memoplan/torch/plan.h says why). The regions are aten's
// (LibTorch's OpenMP backend), so this file needs no OpenMP of its own.
#include <ATen/Parallel.h>
#include <ATen/ops/ones.h>
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {
namespace {

int process_threads() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

// A sum aten splits over the thread's two intra-op threads (a team of two: one worker).
double parallel_sum() { return at::ones({1 << 22}).sum().item<double>(); }

TEST(ReleaseOpenMpThreads, TheCallingThreadsWorkersExitAndComeBackOnUse) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the ThreadSanitizer build has no OpenMP (release_openmp_threads does nothing)";
#endif
  if (at::get_parallel_info().find("parallel backend: OpenMP") == std::string::npos) {
    GTEST_SKIP() << "LibTorch's parallel backend is not OpenMP";
  }
  // On a thread of its own, as a server's planning thread: its first region makes its pool.
  std::thread planning([] {
    at::set_num_threads(2);
    const int before = process_threads();
    ASSERT_EQ(parallel_sum(), 1 << 22);
    ASSERT_EQ(process_threads(), before + 1) << "one worker for this thread's team of two";
    release_openmp_threads();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (process_threads() > before && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(process_threads(), before) << "the worker did not exit";
    EXPECT_EQ(parallel_sum(), 1 << 22);
    EXPECT_EQ(process_threads(), before + 1) << "the next region made its worker again";
  });
  planning.join();
}

}  // namespace
}  // namespace memoplan::torch_ext

// What the kernels' tests share: a ParallelFor on plain std::threads (the torch-free stand-in for
// at::parallel_for).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels::testing {

// Splits [0, n) into `count` chunks, each on a thread of its own.
inline ParallelFor threads(int count) {
  return [count](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    std::vector<std::thread> pool;
    const int64_t chunk = (n + count - 1) / count;
    for (int64_t begin = 0; begin < n; begin += chunk) {
      pool.emplace_back(body, begin, std::min(n, begin + chunk));
    }
    for (std::thread& t : pool) t.join();
  };
}

}  // namespace memoplan::kernels::testing

// The tuned kernels' one way of timing: every "measure once per shape" of tuned/ times its
// candidates here (tuned_support.h states how and why).
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>

#include "budget/released_weights.h"
#include "tuned_support.h"

namespace memoplan::torch_ext::tuned {
namespace {

double ms_of(const std::function<void()>& call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double fastest_ms(const std::function<void()>& call, int rounds) {
  at::RecordFunctionGuard no_callbacks(false);
  call();
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) best = std::min(best, ms_of(call));
  return best;
}

std::vector<double> fastest_each(const std::vector<std::function<void()>>& calls, int rounds) {
  at::RecordFunctionGuard no_callbacks(false);
  for (const auto& call : calls) call();
  std::vector<double> best(calls.size(), 1e300);
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < calls.size(); ++i) best[i] = std::min(best[i], ms_of(calls[i]));
  }
  return best;
}

Timing time_both(const std::function<void()>& memoplan, const std::function<void()>& aten,
                 int rounds, const std::function<void()>& cold) {
  at::RecordFunctionGuard no_callbacks(false);
  auto settle = [&] {
    if (cold) cold();
  };
  Timing t{1e300, 1e300};
  for (int r = 0; r < rounds; ++r) {
    memoplan();
    settle();
    t.memoplan_ms = std::min(t.memoplan_ms, ms_of(memoplan));
    aten();
    settle();
    t.aten_ms = std::min(t.aten_ms, ms_of(aten));
  }
  return t;
}

Measured measure_both(const std::function<void()>& memoplan, const std::function<void()>& aten,
                      int rounds, const std::function<void()>& cold) {
  const Timing t = time_both(memoplan, aten, rounds, cold);
  // aten's side read its weights in plain form: released pages go back now, not at the next
  // packing (vgg16: its 392 MiB classifier's plain pages stayed through the next layer's
  // measurement and set plan()'s peak).
  budget::give_back_plain_weights();
  return {t.memoplan_ms < t.aten_ms, t.memoplan_ms, t.aten_ms};
}

}  // namespace memoplan::torch_ext::tuned

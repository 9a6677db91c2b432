#include "allocation_peak.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "planning/planning.h"

namespace memoplan::torch_ext {
namespace {

#if TORCH_VERSION_MAJOR >= 2
using Total = size_t;
#else
using Total = int64_t;
#endif

// Counts what the allocator reports while it is the thread's PROFILER_STATE debug info. Atomic:
// an intra-op worker that inherits the thread-local state may report too.
class PeakReporter final : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t bytes, Total /*allocated*/, Total /*reserved*/,
                         c10::Device device) override {
    if (device.type() != c10::DeviceType::CPU) return;
    const int64_t live = live_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    reports_.fetch_add(1);
  }
  bool memoryProfilingEnabled() const override { return true; }

  int64_t peak() const { return peak_.load(); }
  int64_t reports() const { return reports_.load(); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, reports_{0};
};

}  // namespace

std::optional<int64_t> peak_temporaries(const std::function<at::Tensor()>& call) {
  auto reporter = std::make_shared<PeakReporter>();
  int64_t returned = 0;
  {
    runtime_pass::Unrecorded beside_the_pass;
    runtime_pass::ToAllocatorBehind reported;
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, reporter);
    at::Tensor out = call();
    returned = static_cast<int64_t>(out.defined() ? out.nbytes() : 0);
    out.reset();  // freed while counted: the allocator forgets the block it reported
  }
  if (reporter->reports() == 0) return std::nullopt;
  return std::max<int64_t>(0, reporter->peak() - returned);
}

}  // namespace memoplan::torch_ext

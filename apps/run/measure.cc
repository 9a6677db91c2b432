#include "measure.h"

#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "counting_allocator.h"
#include "memoplan/torch/fuser.h"
#include "memoplan/torch/memory_min.h"  // sliced_counts
#include "memoplan/torch/plan.h"
#include "outputs_equal.h"
#include "progress.h"

namespace memoplan::run {
namespace {

using Clock = std::chrono::steady_clock;

struct ThreadResult {
  std::vector<double> unplanned_ms, planned_ms, tuned_ms, budgeted_ms;
  uint64_t fully_planned = 0;  // timed planned passes that ran on a plan with no fallback
  double tuned_max_relative_difference = 0;
  uint64_t compared = 0, differing = 0;
  std::string first_difference;
};

// What the worker threads share with the main thread.
struct Shared {
  std::mutex mutex;
  std::condition_variable changed;
  int ready = 0;  // threads done with their warm-up (or failed)
  bool go = false;
  std::exception_ptr error;  // the first exception of any thread
  std::atomic<bool> stop{false};
  std::atomic<int> next_iteration{0};
  Progress* warmup = nullptr;     // set before the threads start
  Progress* measuring = nullptr;  // set before `go`
};

// Why a planned pass may differ from the unplanned one in the last bits without anything being
// wrong: LibTorch's TensorExpr fuser (on by default in 2.x where it can fuse on the CPU) compiles
// groups of the unplanned copy's ops, and the plan's marks (one before each allocating node) keep
// the planned copy's ops apart, on aten's kernels, which need not round as the fused code does
// (torchvision's regnet_y on 2.6: 5.6e-9). `graph`: the unplanned copy's last optimized graph.
std::string fusion_note(std::shared_ptr<torch::jit::Graph> graph) {
  if (!graph) return {};
  int groups = 0;
  // The fuser guards each group with a type check: the group sits in a prim::If's block.
  for (torch::jit::DepthFirstGraphNodeIterator it(graph);
       const torch::jit::Node* node = it.next();) {
    groups += node->kind() == c10::Symbol::fromQualString("prim::TensorExprGroup");
  }
  if (groups == 0) return {};
  return fmt::format(
      "; the unplanned copy ran {} TensorExpr fusion groups (LibTorch's fuser), whose ops the "
      "planned copy runs on aten's kernels, unfused (PYTORCH_TENSOREXPR=0 runs both unfused)",
      groups);
}

void fail(Shared& shared) {
  std::lock_guard<std::mutex> lock(shared.mutex);
  if (!shared.error) shared.error = std::current_exception();
  shared.stop = true;
  shared.changed.notify_all();
}

void worker(const Copies& copies, const InputSource& source, uint64_t first_index, int thread,
            const RunOptions& options, Shared& shared, ThreadResult& result) {
  bool counted_ready = false;
  // Only a copy that fuses has fusion groups to name (fusion_note), and only the first
  // difference is noted: the unplanned copy's graph is read while both hold.
  const bool fusing = torch_ext::fusing_on_cpu();
  try {
    c10::InferenceMode inference;  // per thread; part of the plan's key, as in plan()
    for (int i = 0; i < options.warmup && !shared.stop; ++i) {
      const std::vector<c10::IValue> inputs =
          source(first_index + static_cast<uint64_t>(thread) * options.warmup + i);
      copies.unplanned(inputs);
      copies.planned(inputs);  // the thread's first planned pass makes its slab
      if (copies.tuned) copies.tuned(inputs);
      if (copies.budgeted) copies.budgeted(inputs);
      shared.warmup->advance();
    }
    {
      std::unique_lock<std::mutex> lock(shared.mutex);
      ++shared.ready;
      counted_ready = true;
      shared.changed.notify_all();
      shared.changed.wait(lock, [&] { return shared.go || shared.stop; });
    }
    while (!shared.stop) {
      // A block of iterations: each copy runs all of them in a row (RunOptions::block).
      const int first = shared.next_iteration.fetch_add(options.block);
      if (first >= options.iters) break;
      const int count = std::min(options.block, options.iters - first);
      std::vector<std::vector<c10::IValue>> inputs;
      for (int k = 0; k < count; ++k) {
        inputs.push_back(source(first_index +
                                static_cast<uint64_t>(options.threads) * options.warmup +
                                static_cast<uint64_t>(first + k)));
      }
      // --warm-passes: untimed passes of a copy right before its timed ones.
      auto warm = [&](const Pass& pass) {
        for (int k = 0; k < options.warm_passes; ++k) pass(inputs[0]);
      };
      warm(copies.unplanned);
      std::vector<c10::IValue> unplanned_out(count);
      for (int k = 0; k < count; ++k) {
        CountingAllocator::count_this_thread(true);
        const Clock::time_point start = Clock::now();
        unplanned_out[k] = copies.unplanned(inputs[k]);
        result.unplanned_ms.push_back(ms_since(start));
        CountingAllocator::count_this_thread(false);
      }
      std::shared_ptr<torch::jit::Graph> unplanned_graph;
      if (fusing && result.differing == 0) {
        unplanned_graph = torch::jit::lastExecutedOptimizedGraph();
      }
      warm(copies.planned);
      for (int k = 0; k < count; ++k) {
        const Clock::time_point start = Clock::now();
        const c10::IValue planned_out = copies.planned(inputs[k]);
        result.planned_ms.push_back(ms_since(start));
        result.fully_planned += torch_ext::last_pass().fully_planned();
        ++result.compared;
        if (std::string d = output_difference(unplanned_out[k], planned_out); !d.empty()) {
          if (result.differing++ == 0) result.first_difference = d + fusion_note(unplanned_graph);
        }
      }
      if (copies.tuned) {
        warm(copies.tuned);
        for (int k = 0; k < count; ++k) {
          const Clock::time_point start = Clock::now();
          const c10::IValue tuned_out = copies.tuned(inputs[k]);
          result.tuned_ms.push_back(ms_since(start));
          const double r = max_relative_difference(tuned_out, unplanned_out[k]);
          double& worst = result.tuned_max_relative_difference;
          worst = (r < 0 || worst < 0) ? -1 : std::max(worst, r);
        }
      }
      if (copies.budgeted) {
        warm(copies.budgeted);
        for (int k = 0; k < count; ++k) {
          if (copies.before_budgeted) copies.before_budgeted();
          const Clock::time_point start = Clock::now();
          const c10::IValue budgeted_out = copies.budgeted(inputs[k]);
          result.budgeted_ms.push_back(ms_since(start));
          ++result.compared;
          if (std::string d = output_difference(unplanned_out[k], budgeted_out); !d.empty()) {
            if (result.differing++ == 0) result.first_difference = "budgeted: " + d;
          }
        }
      }
      shared.measuring->advance(count);
    }
  } catch (...) {
    CountingAllocator::count_this_thread(false);
    fail(shared);
    if (!counted_ready) {
      std::lock_guard<std::mutex> lock(shared.mutex);
      ++shared.ready;
      shared.changed.notify_all();
    }
  }
}

}  // namespace

void measure(const Copies& copies, const InputSource& inputs, uint64_t first_index,
             const RunOptions& options, RunReport& report) {
  const int threads = options.threads;
  Shared shared;
  std::vector<ThreadResult> results(threads);
  std::vector<std::thread> workers;
  std::optional<Progress> warmup;
  warmup.emplace("warm-up", static_cast<uint64_t>(threads) * options.warmup, options.progress);
  shared.warmup = &*warmup;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back(worker, std::cref(copies), std::cref(inputs), first_index, t,
                         std::cref(options), std::ref(shared), std::ref(results[t]));
  }
  std::optional<Progress> measuring;
  torch_ext::PlanStats before;
  torch_ext::SlicedCounts sliced_before;
  uint64_t counted_before = 0;
  {
    std::unique_lock<std::mutex> lock(shared.mutex);
    shared.changed.wait(lock, [&] { return shared.ready == threads; });
    warmup->finish();
    // Every thread waits at the barrier now: nothing runs while c10's slot changes.
    before = torch_ext::plan_stats();
    sliced_before = torch_ext::sliced_counts();
    counting_allocator().install();
    counted_before = counting_allocator().counted();
    measuring.emplace("measuring", options.iters, options.progress);
    shared.measuring = &*measuring;
    shared.go = true;
    shared.changed.notify_all();
  }
  for (std::thread& w : workers) w.join();
  measuring->finish();
  counting_allocator().uninstall();
  if (shared.error) std::rethrow_exception(shared.error);

  const torch_ext::PlanStats after = torch_ext::plan_stats();
  const torch_ext::SlicedCounts sliced = torch_ext::sliced_counts();
  report.sliced_convolutions = sliced.convolutions - sliced_before.convolutions;
  report.sliced_poolings = sliced.poolings - sliced_before.poolings;
  report.convolution_shapes_whole = sliced.whole_after_check;
  report.convolution_shapes_saving_little = sliced.whole_saving_little;
  for (ThreadResult& r : results) {
    report.unplanned_ms.insert(report.unplanned_ms.end(), r.unplanned_ms.begin(),
                               r.unplanned_ms.end());
    report.planned_ms.insert(report.planned_ms.end(), r.planned_ms.begin(), r.planned_ms.end());
    report.tuned_ms.insert(report.tuned_ms.end(), r.tuned_ms.begin(), r.tuned_ms.end());
    report.budgeted_ms.insert(report.budgeted_ms.end(), r.budgeted_ms.begin(), r.budgeted_ms.end());
    double& worst = report.tuned_max_relative_difference;
    worst = (r.tuned_max_relative_difference < 0 || worst < 0)
                ? -1
                : std::max(worst, r.tuned_max_relative_difference);
    report.passes_compared += r.compared;
    report.fully_planned_passes += r.fully_planned;
    report.passes_differing += r.differing;
    if (report.first_difference.empty()) report.first_difference = r.first_difference;
  }
  report.unplanned_passes = report.unplanned_ms.size();
  report.unplanned_mallocs = counting_allocator().counted() - counted_before;
  const torch_ext::PlanStats d = after - before;
  report.planned_passes = d.passes;
  report.replayed_passes = d.planned_passes;
  report.planned_mallocs = d.tensor_mallocs;
  report.planned_hits = d.planned_hits;
  report.fallback_not_planned = d.fallback_not_planned;
  report.fallback_overlap = d.fallback_overlap;
  report.fallback_escaping = d.fallback_escaping;
}

}  // namespace memoplan::run

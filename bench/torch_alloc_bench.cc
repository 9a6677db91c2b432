// LibTorch inference under whatever allocator serves the process (bench/run_torch_alloc_bench.sh
// and bench/run_matrix.py run it under glibc, tuned glibc, jemalloc, tcmalloc, mimalloc, the
// memoplan shim and the memoplan graph pass).
//
// Loads one TorchScript file (bench/models/make_zoo.py and bench/make_torchscript_models.py write
// them) or, on LibTorch >= 2.6, an AOTInductor package (.pt2: its run() is the pass, planned as
// one torch_ext::PlannedCall with --plan; its input from the package's metadata), then for each thread count T of --threads (one phase each, in order) T new threads each
// run W warm-up and N timed forward passes on their own input, sharing the module, with one
// intra-op thread (and one OpenBLAS thread) per worker and InferenceMode on. The timed passes of a
// phase start together, after every thread's warm-up. Prints one CSV row per phase: per-pass
// latency (median, p90, ...; all threads' timed passes pooled), allocator calls per pass (only
// when libmemoplan_malloc_counter.so is preloaded: measured, not estimated), memory (peak RSS of
// the phase, RSS and jemalloc's mapped/active bytes averaged over the timed passes), jemalloc's
// mutex waits during the timed passes, the graph pass's slab hits and fallbacks, and per pass the
// workers' minor page faults and involuntary context switches (getrusage(RUSAGE_THREAD)).
//
//   torch_alloc_bench --model models/resnet18.pt --threads 1,2,4 --batch 4 --size 128
//   torch_alloc_bench --header        # the CSV header line
//
// Each pass is marked with memoplan_pass_begin/end when the shim is loaded (--marks 0: leave pass
// detection to the shim, as for an unmodified program).
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../apps/run/input_spec.h"
#include "allocator_info.h"
#include "jemalloc_stats.h"
#include "malloc_counter.h"
#include "memoplan/pass.h"
#include "memoplan/torch/aoti_package.h"
#include "memoplan/torch/call_plan.h"
#include "memoplan/torch/plan.h"
#include "memory_sampler.h"
#include "process_stats.h"
#include "torch_alloc_options.h"

namespace {

using namespace memoplan::bench;
using memoplan::bench::torch_alloc::Options;
using memoplan::bench::torch_alloc::usage;

// --batch replaces the first size; --size the height and width of an image (N, C, H, W with H and
// W > 1: a 1x1 latent like DCGAN's keeps its shape) or the sequence length of tokens (N, L) and
// embeddings (N, L, D).
std::vector<int64_t> resize_input(std::vector<int64_t> shape, int batch, int size) {
  if (batch > 0) shape[0] = batch;
  if (size > 0) {
    if (shape.size() == 4 && shape[2] > 1 && shape[3] > 1) {
      shape[2] = shape[3] = size;
    } else if (shape.size() == 2 || shape.size() == 3) {
      shape[1] = size;
    }
  }
  return shape;
}

at::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float64") return at::kDouble;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  if (dtype == "int16") return at::kShort;
  if (dtype == "int8") return at::kChar;
  if (dtype == "uint8") return at::kByte;
  if (dtype == "bool") return at::kBool;
  return at::kFloat;
}

// One pass of the loaded model (the module's forward, or the package's run()).
using Forward = std::function<c10::IValue(const std::vector<c10::IValue>&)>;

struct Loaded {
  torch::jit::Module module;
  std::unique_ptr<memoplan::torch_ext::AotiPackage> package;  // a .pt2 instead of `module`
  std::unique_ptr<memoplan::torch_ext::PlannedCall> call;     // its plan, with --plan
  Forward forward;
  std::string shape_text;
  std::vector<at::Tensor> inputs;  // one per thread of the largest phase
  memoplan::torch_ext::PlanSummary planned;
  long rss_after_load_kib = 0, maxrss_load_kib = 0;
  int blas_threads = 0;
};

// Loads the model and sets `loaded.forward`; returns its input (the file's extra files or the
// package's metadata, --input, --batch and --size).
memoplan::run::InputSpec prepare_model(const Options& o, Loaded& loaded) {
  std::map<std::string, std::string> extra{
      {"input_shape", ""}, {"input_dtype", ""}, {"input_high", ""}};
  if (memoplan::torch_ext::is_aoti_package(o.model)) {
    // A model per thread of the largest phase (their run() calls run at once).
    loaded.package = std::make_unique<memoplan::torch_ext::AotiPackage>(
        o.model, static_cast<size_t>(*std::max_element(o.threads.begin(), o.threads.end())));
    for (auto& [key, value] : extra) value = loaded.package->metadata(key);
    loaded.forward = [package = loaded.package.get()](const std::vector<c10::IValue>& in) {
      return package->run(in);
    };
  } else {
    torch::jit::ExtraFilesMap files(extra.begin(), extra.end());
    loaded.module = torch::jit::load(o.model, torch::kCPU, files);
    loaded.module.eval();
    for (auto& [key, value] : extra) value = files[key];
    loaded.forward = [module = &loaded.module](const std::vector<c10::IValue>& in) {
      return module->forward(in);
    };
  }
  auto made = memoplan::run::make_input_spec(o.model, o.input, "", extra["input_shape"],
                                             extra["input_dtype"], extra["input_high"]);
  if (!made) usage(made.error());
  memoplan::run::InputSpec spec = *made;
  spec.shape = resize_input(spec.shape, o.batch, o.size);
  // AOTInductor checks no input shape: a package runs the one it was exported for.
  if (loaded.package && spec.shape != made->shape) {
    usage(o.model + " was exported for " + memoplan::run::shape_text(made->shape) + ", not " +
          memoplan::run::shape_text(spec.shape) + " (--batch, --size)");
  }
  return spec;
}

at::Tensor make_input(const memoplan::run::InputSpec& spec) {
  const at::ScalarType type = scalar_type(spec.dtype);
  if (memoplan::run::integer_dtype(spec.dtype)) {
    return torch::randint(0, spec.high, spec.shape, at::TensorOptions().dtype(type));
  }
  return torch::randn(spec.shape, at::TensorOptions().dtype(type));
}

// What the threads of one phase share: the start line, and the snapshot the last thread to
// finish its warm-up takes before the timed passes start together.
struct Phase {
  int threads = 0;
  std::atomic<int> ready{0}, warmed{0};
  std::atomic<bool> go{false};
  const JemallocStats* jemalloc = nullptr;
  MemorySampler* sampler = nullptr;
  JemallocMutexTotals mutexes_at_start;
};

struct WorkerResult {
  std::vector<double> ms;  // timed passes only
  memoplan_bench_counts before{}, after{};
  // This thread's minor page faults (the allocator giving memory back and taking it again shows
  // up here) and involuntary context switches (other processes competing for the cores), timed
  // passes only.
  long faults = 0, preempted = 0;
  std::chrono::steady_clock::time_point timed_start, timed_end;
  uint64_t digest = 0;  // of the last output
  int intra_op_threads = 0;
};

// FNV-1a of a tensor's bytes, read in place (no allocation inside a marked pass): equal across
// allocators when the outputs are bit-identical.
uint64_t digest(const at::Tensor& t) {
  if (!t.is_contiguous()) return 0;
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0, n = t.nbytes(); i < n; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

void wait_for_all_warmed(Phase& phase) {
  if (phase.warmed.fetch_add(1) + 1 == phase.threads) {
    phase.mutexes_at_start = phase.jemalloc->mutexes();
    phase.sampler->set_timed(true);
    phase.go.store(true);
  }
  while (!phase.go.load()) std::this_thread::yield();
}

// One loop for warm-up and timed passes: under the shim the call sites (and so its keys) must be
// the same in both. The output is released inside the marked pass; the timing covers forward().
void worker(const Forward& forward, const at::Tensor& input, const Options& o, int passes,
            Phase& phase, WorkerResult& result) {
  at::set_num_threads(1);  // OpenMP's thread count is per calling thread
  c10::InferenceMode inference;
  result.intra_op_threads = at::get_num_threads();
  result.ms.reserve(passes);
  std::vector<c10::IValue> inputs{input};
  rusage usage{};
  phase.ready.fetch_add(1);
  while (phase.ready.load() < phase.threads) std::this_thread::yield();
  for (int pass = 0; pass < o.warmup + passes; ++pass) {
    const bool timed = pass >= o.warmup;
    if (pass == o.warmup) {
      wait_for_all_warmed(phase);
      result.timed_start = std::chrono::steady_clock::now();
      if (memoplan_bench_malloc_counts) memoplan_bench_malloc_counts(&result.before);
      getrusage(RUSAGE_THREAD, &usage);
      result.faults = -usage.ru_minflt;
      result.preempted = -usage.ru_nivcsw;
    }
    if (o.marks && memoplan_pass_begin) memoplan_pass_begin();
    const auto start = std::chrono::steady_clock::now();
    c10::IValue output = forward(inputs);
    const auto end = std::chrono::steady_clock::now();
    if (output.isTensor()) result.digest = digest(output.toTensor());
    if (output.isTensorList() && output.toTensorList().size() > 0) {
      result.digest = digest(output.toTensorList().get(0));
    }
    output = c10::IValue();
    if (o.marks && memoplan_pass_end) memoplan_pass_end();
    if (timed) result.ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  result.timed_end = std::chrono::steady_clock::now();
  if (memoplan_bench_malloc_counts) memoplan_bench_malloc_counts(&result.after);
  getrusage(RUSAGE_THREAD, &usage);
  result.faults += usage.ru_minflt;
  result.preempted += usage.ru_nivcsw;
}

// The graph pass's counters of one phase, in the shim's statistics vocabulary (the report reads
// both the same way): every pass after plan() is a steady-state one.
void print_plan_stats(const memoplan::torch_ext::PlanSummary& planned,
                      const memoplan::torch_ext::PlanStats& d) {
  std::fprintf(stderr,
               "memoplan: graph pass: %s\n"
               "memoplan: passes %llu, plans %llu, plan failures 0\n"
               "memoplan: planned hits %llu, steady-state hits %llu, steady-state fallbacks %llu\n"
               "memoplan: fallbacks not_planned %llu escaping %llu overlap %llu alignment 0 "
               "guard_full 0\n"
               "memoplan: slab bytes %llu, lower bound %llu\n",
               memoplan::torch_ext::to_string(d).c_str(), static_cast<unsigned long long>(d.passes),
               static_cast<unsigned long long>(d.plans),
               static_cast<unsigned long long>(d.planned_hits),
               static_cast<unsigned long long>(d.planned_hits),
               static_cast<unsigned long long>(d.fallback_not_planned + d.fallback_overlap),
               static_cast<unsigned long long>(d.fallback_not_planned),
               static_cast<unsigned long long>(d.fallback_escaping),
               static_cast<unsigned long long>(d.fallback_overlap),
               static_cast<unsigned long long>(d.slab_bytes),
               static_cast<unsigned long long>(planned.lower_bound_bytes * d.slabs));
}

void run_phase(const Options& o, Loaded& loaded, int threads, const JemallocStats& jemalloc,
               std::FILE* memory_trace) {
  const int passes =
      o.timed_total > 0 ? std::max(1, (o.timed_total + threads - 1) / threads) : o.passes;
  const memoplan::torch_ext::PlanStats plan_before = memoplan::torch_ext::plan_stats();
  const bool hwm_reset = reset_peak_rss();
  MemorySampler sampler(jemalloc, o.sample_ms);
  Phase phase;
  phase.threads = threads;
  phase.jemalloc = &jemalloc;
  phase.sampler = &sampler;
  std::vector<WorkerResult> results(threads);
  sampler.start();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back(worker, std::cref(loaded.forward), std::cref(loaded.inputs[t]),
                         std::cref(o), passes, std::ref(phase), std::ref(results[t]));
  }
  for (std::thread& t : workers) t.join();
  sampler.set_timed(false);
  const JemallocMutexTotals mutexes = jemalloc.mutexes() - phase.mutexes_at_start;
  sampler.stop();
  const MemoryAverages memory = sampler.averages();

  std::vector<double> ms;
  memoplan_bench_counts total{};
  long faults = 0, preempted = 0;
  auto timed_start = results[0].timed_start, timed_end = results[0].timed_end;
  for (const WorkerResult& r : results) {
    timed_start = std::min(timed_start, r.timed_start);
    timed_end = std::max(timed_end, r.timed_end);
    faults += r.faults;
    preempted += r.preempted;
    ms.insert(ms.end(), r.ms.begin(), r.ms.end());
    total.allocs += r.after.allocs - r.before.allocs;
    total.frees += r.after.frees - r.before.frees;
    total.reallocs += r.after.reallocs - r.before.reallocs;
    total.zero_size += r.after.zero_size - r.before.zero_size;
    total.bytes += r.after.bytes - r.before.bytes;
  }
  std::sort(ms.begin(), ms.end());
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const long maxrss = std::max(loaded.maxrss_load_kib, usage.ru_maxrss);
  const memoplan::torch_ext::PlanStats plan = memoplan::torch_ext::plan_stats() - plan_before;
  if (!o.plan.empty()) print_plan_stats(loaded.planned, plan);

  const std::string chain = malloc_chain_text();
  std::fprintf(
      stderr,
      "torch_alloc_bench: %s on %s, %d thread(s) x (%d warm-up + %d timed) passes, "
      "intra-op threads %d, OpenBLAS threads %d, pass marks %s; malloc from %s (loaded: %s)%s\n",
      o.name.c_str(), loaded.shape_text.c_str(), threads, o.warmup, passes,
      results[0].intra_op_threads, loaded.blas_threads,
      o.marks && memoplan_pass_begin ? "on" : "off", chain.c_str(), allocator_versions().c_str(),
      hwm_reset ? "" : "; VmHWM could not be reset (includes loading)");
  const double n = static_cast<double>(passes) * threads;
  // Throughput of the timed passes: from the first thread's first to the last thread's last.
  const double seconds = std::chrono::duration<double>(timed_end - timed_start).count();
  std::printf("%s,%s,%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.1f,%.2f,", o.config.c_str(),
              o.name.c_str(), loaded.shape_text.c_str(), threads, o.warmup, passes,
              percentile(ms, 50), percentile(ms, 90), ms.front(), mean, ms.back(), n / seconds,
              faults / n, preempted / n);
  if (memoplan_bench_malloc_counts) {
    std::printf("%.1f,%.1f,%.1f,%.1f,%.0f,", total.allocs / n, total.frees / n, total.reallocs / n,
                total.zero_size / n, total.bytes / n);
  } else {
    std::printf(",,,,,");
  }
  std::printf("%ld,%ld,%ld,%ld,%016llx,%s,", maxrss, loaded.rss_after_load_kib, status_kib("VmHWM"),
              status_kib("VmRSS"), static_cast<unsigned long long>(results[0].digest),
              chain.c_str());
  std::printf("%.0f,", memory.rss_bytes / 1024);
  if (jemalloc.available()) {
    std::printf("%.0f,%.0f,%zu,%llu,%llu,%.3f,%.1f,", memory.jemalloc_mapped / 1024,
                memory.jemalloc_active / 1024, memory.samples,
                static_cast<unsigned long long>(mutexes.ops),
                static_cast<unsigned long long>(mutexes.waits), mutexes.wait_ns / 1e6,
                mutexes.max_wait_ns / 1e3);
  } else {
    std::printf(",,%zu,,,,,", memory.samples);
  }
  if (!o.plan.empty()) {
    std::printf("%llu,%llu,%llu,%llu,%llu\n", static_cast<unsigned long long>(plan.planned_hits),
                static_cast<unsigned long long>(plan.fallback_not_planned + plan.fallback_overlap),
                static_cast<unsigned long long>(plan.fallback_escaping),
                static_cast<unsigned long long>(plan.slab_bytes),
                static_cast<unsigned long long>(loaded.planned.lower_bound_bytes));
  } else {
    std::printf(",,,,\n");
  }
  std::fflush(stdout);
  if (memory_trace) {
    for (const MemorySample& s : sampler.samples()) {
      std::fprintf(memory_trace, "%s,%s,%s,%d,%.1f,%d,%llu,%llu,%llu\n", o.config.c_str(),
                   o.name.c_str(), loaded.shape_text.c_str(), threads, s.t_ms, s.timed ? 1 : 0,
                   static_cast<unsigned long long>(s.rss_bytes),
                   static_cast<unsigned long long>(s.jemalloc.mapped),
                   static_cast<unsigned long long>(s.jemalloc.active));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = memoplan::bench::torch_alloc::parse(argc, argv);
  Loaded loaded;
  loaded.blas_threads = limit_blas_threads();
  at::set_num_threads(1);
  const memoplan::run::InputSpec spec = prepare_model(o, loaded);
  loaded.shape_text = memoplan::run::shape_text(spec.shape);
  torch::manual_seed(0);
  const int most_threads = *std::max_element(o.threads.begin(), o.threads.end());
  for (int t = 0; t < most_threads; ++t) loaded.inputs.push_back(make_input(spec));
  // The graph-pass configuration: plan once here (warm-up, profile, plan); every worker then
  // replays its own slab from its first pass. The key (shapes, intra-op threads = 1, inference
  // mode) is the workers'.
  if (!o.plan.empty()) {
    c10::InferenceMode inference;
    memoplan::torch_ext::PlanOptions options;
    options.strategy = o.plan;
    const std::vector<c10::IValue> first{loaded.inputs[0]};
    if (loaded.package) {
      // A package's run() as one planned call.
      loaded.call = std::make_unique<memoplan::torch_ext::PlannedCall>(options);
      loaded.planned = loaded.call->plan(first, [&] { return loaded.package->run(first); });
      loaded.forward = [&loaded](const std::vector<c10::IValue>& in) {
        return loaded.call->run(in, [&] { return loaded.package->run(in); });
      };
    } else {
      loaded.planned = memoplan::torch_ext::plan(loaded.module, first, options);
    }
  }
  loaded.rss_after_load_kib = status_kib("VmRSS");
  rusage self_usage{};
  getrusage(RUSAGE_SELF, &self_usage);
  loaded.maxrss_load_kib = self_usage.ru_maxrss;  // resetting VmHWM lowers ru_maxrss too

  const JemallocStats jemalloc;
  std::FILE* memory_trace = nullptr;
  if (!o.memory_trace.empty()) {
    memory_trace = std::fopen(o.memory_trace.c_str(), "a");
    if (!memory_trace) usage("cannot write " + o.memory_trace);
  }
  for (int threads : o.threads) run_phase(o, loaded, threads, jemalloc, memory_trace);
  if (memory_trace) std::fclose(memory_trace);
  return 0;
}

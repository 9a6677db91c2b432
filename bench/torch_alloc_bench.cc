// LibTorch inference under whatever allocator serves the process (bench/run_torch_alloc_bench.sh
// runs it under glibc, tuned glibc, jemalloc, tcmalloc, mimalloc and the memoplan shim).
//
// Loads one TorchScript file (bench/make_torchscript_models.py writes them), then T threads each
// run W warm-up and N timed forward passes on their own input, sharing the module, with one
// intra-op thread (and one OpenBLAS thread) per worker and InferenceMode on. Prints one CSV row:
// per-pass latency (median, p90, ...; all threads' timed passes pooled), allocator calls per pass
// (only when libmemoplan_malloc_counter.so is preloaded: measured, not estimated), and memory:
// the process's peak RSS (ru_maxrss: the larger of its value after loading the model and at the
// end, as resetting VmHWM resets it too), the RSS after loading, VmHWM reset after loading (the
// peak while the passes ran) and the RSS at the end; and per pass, the workers' minor page faults
// and involuntary context switches (getrusage(RUSAGE_THREAD)).
//
//   torch_alloc_bench --model bench/results/tmp/models/resnet18.pt --threads 2 --passes 30
//   torch_alloc_bench --header        # the CSV header line
//
// Each pass is marked with memoplan_pass_begin/end when the shim is loaded (--marks 0: leave pass
// detection to the shim, as for an unmodified program).
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "allocator_info.h"
#include "malloc_counter.h"
#include "memoplan/pass.h"
#include "memoplan/torch/plan.h"

namespace {

struct Options {
  std::string model;
  std::string name;    // the model's name in the CSV; default: the file's stem
  std::string config;  // the allocator configuration's label, echoed into the CSV
  std::string input;   // e.g. 1x3x224x224; default: the file's "input_shape" extra file
  int threads = 1;
  int warmup = 5;  // the profiling executor re-optimizes the graph during the first 2-3 passes
  int passes = 20;
  bool marks = true;
  std::string plan;  // --plan STRATEGY: plan the module with memoplan's LibTorch graph pass
};

constexpr const char* kCsvHeader =
    "config,model,input,threads,warmup,passes,median_ms,p90_ms,min_ms,mean_ms,max_ms,"
    "passes_per_s,minor_faults_per_pass,preempted_per_pass,allocs_per_pass,frees_per_pass,reallocs_"
    "per_pass,zero_size_per_pass,"
    "bytes_per_pass,maxrss_kib,rss_after_load_kib,hwm_passes_kib,rss_end_kib,output_fnv1a,"
    "malloc_chain";

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "torch_alloc_bench: %s\nusage: torch_alloc_bench --model FILE.pt [--name NAME] "
               "[--config LABEL] [--input 1x3x224x224] [--threads T] [--warmup W] [--passes N] "
               "[--marks 0|1] [--plan STRATEGY]\n       torch_alloc_bench --header\n",
               message);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--header") {
      std::printf("%s\n", kCsvHeader);
      std::exit(0);
    }
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--model")
      o.model = value;
    else if (flag == "--name")
      o.name = value;
    else if (flag == "--config")
      o.config = value;
    else if (flag == "--input")
      o.input = value;
    else if (flag == "--threads")
      o.threads = std::atoi(value);
    else if (flag == "--warmup")
      o.warmup = std::atoi(value);
    else if (flag == "--passes")
      o.passes = std::atoi(value);
    else if (flag == "--plan")
      o.plan = value;
    else if (flag == "--marks")
      o.marks = std::atoi(value) != 0;
    else
      usage(("unknown option " + flag).c_str());
  }
  if (o.model.empty()) usage("--model is required");
  if (o.threads < 1 || o.warmup < 0 || o.passes < 1) usage("need threads >= 1, passes >= 1");
  if (o.name.empty()) {
    const size_t slash = o.model.find_last_of('/');
    o.name = o.model.substr(slash == std::string::npos ? 0 : slash + 1);
    o.name = o.name.substr(0, o.name.find('.'));
  }
  return o;
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  for (std::string dim; std::getline(in, dim, 'x');) shape.push_back(std::stoll(dim));
  if (shape.empty()) usage(("bad input shape " + text).c_str());
  return shape;
}

// A field of /proc/self/status in KiB (VmRSS, VmHWM), or -1.
long status_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  const size_t length = std::strlen(field);
  for (std::string line; std::getline(status, line);) {
    if (line.compare(0, length, field) == 0 && line[length] == ':') {
      return std::atol(line.c_str() + length + 1);
    }
  }
  return -1;
}

// Sets VmHWM back to the current RSS (Linux >= 4.0), so that it measures the passes alone and not
// loading the model, which reads the whole file into memory.
bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5" << std::flush;
  return static_cast<bool>(clear);
}

// One worker thread for everything it must know about ATen; OpenBLAS (Debian's libblas.so.3 with
// libopenblas0-pthread) keeps its own thread pool, sized by the cores, unless told otherwise.
// Returns OpenBLAS's thread count afterwards, or 0 when OpenBLAS is not loaded.
int limit_blas_threads() {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return 0;
  set(1);
  return get();
}

// How the module is made ready before the threads start. Plain LibTorch is load + eval; a
// configuration that rewrites the module (the LibTorch graph pass of issue 4) belongs here.
torch::jit::Module prepare_module(const Options& o, std::string* input_shape) {
  torch::jit::ExtraFilesMap extra{{"input_shape", ""}};
  torch::jit::Module module = torch::jit::load(o.model, torch::kCPU, extra);
  module.eval();
  *input_shape = o.input.empty() ? extra["input_shape"] : o.input;
  if (input_shape->empty()) usage("no --input and no input_shape in the model file");
  return module;
}

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

// One loop for warm-up and timed passes: under the shim the call sites (and so its keys) must be
// the same in both. The output is released inside the marked pass; the timing covers forward().
void worker(torch::jit::Module& module, const at::Tensor& input, const Options& o,
            std::atomic<int>& ready, WorkerResult& result) {
  at::set_num_threads(1);  // OpenMP's thread count is per calling thread
  c10::InferenceMode inference;
  result.intra_op_threads = at::get_num_threads();
  result.ms.reserve(o.passes);
  std::vector<c10::IValue> inputs{input};
  rusage usage{};
  ready.fetch_add(1);
  while (ready.load() < o.threads) std::this_thread::yield();
  for (int pass = 0; pass < o.warmup + o.passes; ++pass) {
    const bool timed = pass >= o.warmup;
    if (pass == o.warmup) {
      result.timed_start = std::chrono::steady_clock::now();
      if (memoplan_bench_malloc_counts) memoplan_bench_malloc_counts(&result.before);
      getrusage(RUSAGE_THREAD, &usage);
      result.faults = -usage.ru_minflt;
      result.preempted = -usage.ru_nivcsw;
    }
    if (o.marks && memoplan_pass_begin) memoplan_pass_begin();
    const auto start = std::chrono::steady_clock::now();
    c10::IValue output = module.forward(inputs);
    const auto end = std::chrono::steady_clock::now();
    if (output.isTensor()) result.digest = digest(output.toTensor());
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

// The graph pass's counters since planning, in the shim's statistics vocabulary (the report reads
// both the same way): every pass after plan() is a steady-state one.
void print_plan_stats(const memoplan::torch_ext::PlanSummary& planned,
                      const memoplan::torch_ext::PlanStats& before) {
  const memoplan::torch_ext::PlanStats now = memoplan::torch_ext::plan_stats();
  const uint64_t hits = now.planned_hits - before.planned_hits;
  const uint64_t not_planned = now.fallback_not_planned - before.fallback_not_planned;
  const uint64_t overlap = now.fallback_overlap - before.fallback_overlap;
  std::fprintf(
      stderr,
      "memoplan: graph pass: %s\n"
      "memoplan: passes %llu, plans %llu, plan failures 0\n"
      "memoplan: planned hits %llu, steady-state hits %llu, steady-state fallbacks %llu\n"
      "memoplan: fallbacks not_planned %llu escaping %llu overlap %llu alignment 0 "
      "guard_full 0\n"
      "memoplan: slab bytes %llu, lower bound %llu\n",
      memoplan::torch_ext::to_string(now).c_str(),
      static_cast<unsigned long long>(now.passes - before.passes),
      static_cast<unsigned long long>(now.plans), static_cast<unsigned long long>(hits),
      static_cast<unsigned long long>(hits), static_cast<unsigned long long>(not_planned + overlap),
      static_cast<unsigned long long>(not_planned),
      static_cast<unsigned long long>(now.fallback_escaping - before.fallback_escaping),
      static_cast<unsigned long long>(overlap), static_cast<unsigned long long>(now.slab_bytes),
      static_cast<unsigned long long>(planned.lower_bound_bytes * now.slabs));
}

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  const size_t rank = static_cast<size_t>(p / 100.0 * sorted.size() + 0.999999);
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int blas_threads = limit_blas_threads();
  at::set_num_threads(1);
  std::string shape_text;
  torch::jit::Module module = prepare_module(o, &shape_text);
  const std::vector<int64_t> shape = parse_shape(shape_text);
  torch::manual_seed(0);
  std::vector<at::Tensor> inputs;
  for (int t = 0; t < o.threads; ++t) inputs.push_back(torch::randn(shape));
  // The graph-pass configuration: plan once here (warm-up, profile, plan); every worker then
  // replays its own slab from its first pass. The key (shapes, intra-op threads = 1, inference
  // mode) is the workers'.
  memoplan::torch_ext::PlanSummary planned;
  memoplan::torch_ext::PlanStats after_plan;
  if (!o.plan.empty()) {
    c10::InferenceMode inference;
    memoplan::torch_ext::PlanOptions options;
    options.strategy = o.plan;
    planned = memoplan::torch_ext::plan(module, {inputs[0]}, options);
    after_plan = memoplan::torch_ext::plan_stats();
  }
  const long rss_after_load = status_kib("VmRSS");
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const long maxrss_load = usage.ru_maxrss;  // the reset below lowers ru_maxrss too
  const bool hwm_reset = reset_peak_rss();

  std::vector<WorkerResult> results(o.threads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back(worker, std::ref(module), std::cref(inputs[t]), std::cref(o),
                         std::ref(ready), std::ref(results[t]));
  }
  for (std::thread& t : threads) t.join();

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
  getrusage(RUSAGE_SELF, &usage);
  const long maxrss = std::max(maxrss_load, usage.ru_maxrss);

  if (!o.plan.empty()) print_plan_stats(planned, after_plan);
  const std::string chain = memoplan::bench::malloc_chain_text();
  std::fprintf(
      stderr,
      "torch_alloc_bench: %s on %s, %d thread(s) x (%d warm-up + %d timed) passes, "
      "intra-op threads %d, OpenBLAS threads %d, pass marks %s; malloc from %s (loaded: %s)%s\n",
      o.name.c_str(), shape_text.c_str(), o.threads, o.warmup, o.passes,
      results[0].intra_op_threads, blas_threads, o.marks && memoplan_pass_begin ? "on" : "off",
      chain.c_str(), memoplan::bench::allocator_versions().c_str(),
      hwm_reset ? "" : "; VmHWM could not be reset (includes loading)");
  const double n = static_cast<double>(o.passes) * o.threads;
  // Throughput of the timed passes: from the first thread's first to the last thread's last.
  const double seconds = std::chrono::duration<double>(timed_end - timed_start).count();
  std::printf("%s,%s,%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.1f,%.2f,", o.config.c_str(),
              o.name.c_str(), shape_text.c_str(), o.threads, o.warmup, o.passes, percentile(ms, 50),
              percentile(ms, 90), ms.front(), mean, ms.back(), n / seconds, faults / n,
              preempted / n);
  if (memoplan_bench_malloc_counts) {
    std::printf("%.1f,%.1f,%.1f,%.1f,%.0f,", total.allocs / n, total.frees / n, total.reallocs / n,
                total.zero_size / n, total.bytes / n);
  } else {
    std::printf(",,,,,");
  }
  std::printf("%ld,%ld,%ld,%ld,%016llx,%s\n", maxrss, rss_after_load, status_kib("VmHWM"),
              status_kib("VmRSS"), static_cast<unsigned long long>(results[0].digest),
              chain.c_str());
  return 0;
}

// The one translation unit of memoplan-run that includes <torch/script.h> (slow to compile).
#include "session.h"

#include <dlfcn.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <sys/stat.h>
#include <torch/script.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>

#include "input_spec.h"
#include "measure.h"
#include "memoplan/heapmap.h"
#include "memoplan/process_status.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/plan.h"
#include "memoplan/trace_io.h"
#include "progress.h"
#include "rss_probe.h"

namespace memoplan::run {
namespace {

using Clock = std::chrono::steady_clock;

// One line out of a LibTorch message: TorchScript errors carry the script's traceback first and
// the error last ("RuntimeError: ..."); c10 errors their C++ backtrace after the first line.
std::string one_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (const size_t at = text.rfind("RuntimeError: "); at != std::string::npos) {
    text = text.substr(at + 14);
  }
  const size_t begin = text.find_first_not_of(" \n\t");
  text = begin == std::string::npos ? "" : text.substr(begin);
  text = text.substr(0, text.find('\n'));
  return text.size() > 300 ? text.substr(0, 300) + "..." : text;
}

void check_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw BadInput(path + ": no such file");
  if (S_ISDIR(st.st_mode)) throw BadInput(path + ": is a directory, not a TorchScript file");
}

// aten's intra-op setting does not reach OpenBLAS (Debian's libblas.so.3 with
// libopenblas0-pthread), which keeps a pool of one thread per core and spins it after each call:
// "one intra-op thread" must mean one core for aten's BLAS calls too, or the stock passes would
// use every core while the planned and tuned ones use one.
void limit_openblas_threads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
}

torch::jit::Module load(const std::string& path, torch::jit::ExtraFilesMap* extra) {
  try {
    torch::jit::ExtraFilesMap none;
    torch::jit::Module module = torch::jit::load(path, c10::kCPU, extra ? *extra : none);
    module.eval();
    return module;
  } catch (const std::exception& e) {
    throw BadInput(path + ": not a TorchScript file (" + one_line(e) + ")");
  }
}

c10::ScalarType scalar_type(const std::string& dtype) {
  static const std::pair<const char*, c10::ScalarType> types[] = {
      {"float32", at::kFloat},     {"float64", at::kDouble}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},     {"int32", at::kInt},
      {"int16", at::kShort},       {"int8", at::kChar},      {"uint8", at::kByte},
      {"bool", at::kBool}};
  for (const auto& [name, type] : types) {
    if (dtype == name) return type;
  }
  throw BadInput("unknown dtype " + dtype);
}

// The same input for every pass of both modules: seeded, so every run feeds the same values.
at::Tensor make_input(const InputSpec& spec) {
  torch::manual_seed(0);
  const c10::ScalarType type = scalar_type(spec.dtype);
  if (integer_dtype(spec.dtype)) {
    return torch::randint(0, spec.high, spec.shape, at::TensorOptions().dtype(type));
  }
  return torch::randn(spec.shape).to(type);
}

// Shapes that vary: pass `index` gets draw_shape(spec, seed, index) and values from a generator
// of its own (threads draw their inputs at once; the global one would interleave them).
at::Tensor make_input(const InputSpec& spec, uint64_t seed, uint64_t index) {
  const std::vector<int64_t> shape = draw_shape(spec, seed, index);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003 + index);
  const c10::ScalarType type = scalar_type(spec.dtype);
  if (integer_dtype(spec.dtype)) {
    return torch::randint(0, spec.high, shape, generator, at::TensorOptions().dtype(type));
  }
  return torch::randn(shape, generator).to(type);
}

// The input of the run: --input/--dtype/--draw over what the file carries.
InputSpec input_spec(const RunOptions& options, torch::jit::ExtraFilesMap& extra) {
  Result<InputSpec> spec =
      make_input_spec(options.model, options.input, options.dtype, extra["input_shape"],
                      extra["input_dtype"], extra["input_high"]);
  if (!spec) throw BadInput(spec.error());
  const std::optional<Draw> draw = parse_draw(options.draw);
  if (!draw) throw BadInput("unknown --draw '" + options.draw + "' (uniform, lognormal)");
  spec->draw = *draw;
  return std::move(*spec);
}

// Every pass's inputs: one fixed input, or one drawn per pass.
InputSource input_source(const InputSpec& spec, uint64_t seed) {
  if (!spec.varies()) {
    std::vector<c10::IValue> fixed = {make_input(spec)};
    return [fixed](uint64_t) { return fixed; };
  }
  return [spec, seed](uint64_t index) {
    return std::vector<c10::IValue>{make_input(spec, seed, index)};
  };
}

// The bytes of the module's parameters and buffers (each storage once).
uint64_t weight_bytes(const torch::jit::Module& module) {
  std::set<const void*> seen;
  uint64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage() && seen.insert(t.storage().unsafeGetStorageImpl()).second)
      bytes += t.storage().nbytes();
  };
  for (const at::Tensor& t : module.parameters()) add(t);
  for (const at::Tensor& t : module.buffers()) add(t);
  return bytes;
}

// Plans `budgeted` under options.budget and fills the report's budget fields but the sampled ones.
void plan_budgeted(torch::jit::Module& budgeted, const std::vector<c10::IValue>& inputs,
                   const RunOptions& options, uint64_t slab_bytes, RunReport& report) {
  const torch_ext::BudgetText text = *torch_ext::parse_budget(options.budget);
  report.budget_text = options.budget;
  report.page_cache = options.cold ? "cold" : "warm";
  report.budget_bytes =
      text.bytes ? text.bytes
                 : static_cast<uint64_t>(static_cast<double>(weight_bytes(budgeted) + slab_bytes) *
                                         text.percent / 100);
  torch_ext::PlanOptions plan_options;
  plan_options.strategy = options.strategy;
  plan_options.memory = options.memory;
  plan_options.budget_bytes = report.budget_bytes;
  torch_ext::PlanSummary summary;
  try {
    summary = torch_ext::plan(budgeted, inputs, plan_options);
  } catch (const torch_ext::BudgetTooSmall& e) {
    throw BadInput(options.model + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error("planning " + options.model +
                             " under a budget failed: " + one_line(e));
  }
  const torch_ext::BudgetSummary b = *torch_ext::budget_summary(budgeted);
  report.weights_bytes = b.weights_bytes;
  report.budget_slab_bytes = summary.slab_bytes;
  report.budget_pinned_bytes = b.pinned_bytes;
  report.budget_streamed_bytes = b.streamed_bytes;
  report.budget_planned_peak_bytes = b.planned_peak_bytes;
  report.budget_work_bytes = b.work_bytes;
  report.budget_smallest_bytes = b.smallest_budget_bytes;
  report.budget_sliced_groups = b.sliced_groups;
  report.weight_file = b.weight_file;
  // A new budget takes no pass: timed here with the same one.
  const Clock::time_point start = Clock::now();
  torch_ext::set_budget(budgeted, report.budget_bytes);
  report.budget_replan_ms = ms_since(start);
}

// Three passes with the resident weights sampled at every step: the peak.
void sample_budgeted(torch::jit::Module& budgeted, const InputSource& source, uint64_t first,
                     RunReport& report) {
  torch_ext::sample_resident_weights(budgeted, true);
  torch_ext::resident_weight_peak(budgeted, true);
  for (uint64_t i = 0; i < 3; ++i) budgeted.forward(source(first + i));
  report.resident_weight_peak_bytes = torch_ext::resident_weight_peak(budgeted, true);
  torch_ext::sample_resident_weights(budgeted, false);
  report.peak_resident_bytes = report.budget_slab_bytes + report.resident_weight_peak_bytes;
}

uint64_t elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

void write_heapmap(const torch::jit::Module& planned, const torch_ext::PlanSummary& summary,
                   const RunOptions& options, const RunReport& report) {
  std::optional<torch_ext::PlanDetail> detail = torch_ext::plan_detail(planned, summary.key);
  if (!detail) throw std::runtime_error("the plan's trace is not available for the heap map");
  HeapmapOptions heapmap;
  heapmap.title = report.model + " " + report.input + " " + report.dtype + ", " + summary.strategy;
  const std::string svg = render_heapmap_svg(detail->trace, detail->plan, heapmap);
  if (std::string error = write_file_text(options.heapmap, svg); !error.empty()) {
    throw BadInput(error);
  }
}

// --trace: the profiled pass (with memory min, its sharing claims), for `memoplan plan`.
void write_profiled_trace(const torch::jit::Module& planned, const torch_ext::PlanSummary& summary,
                          const RunOptions& options) {
  std::optional<torch_ext::PlanDetail> detail = torch_ext::plan_detail(planned, summary.key);
  if (!detail) throw std::runtime_error("the plan's trace is not available for --trace");
  if (std::string error = write_trace(detail->trace, options.trace); !error.empty()) {
    throw BadInput(error);
  }
}

}  // namespace

// The file name of the library (or program) that defines the malloc this process calls.
static std::string malloc_library() {
  Dl_info info{};
  void* address = dlsym(RTLD_DEFAULT, "malloc");
  if (!address || !dladdr(address, &info) || !info.dli_fname) return "?";
  const std::string path = info.dli_fname;
  return path.substr(path.rfind('/') + 1);
}

RunReport run_session(const RunOptions& options) {
  RunReport report;
  report.malloc_library = malloc_library();
  report.model = options.model;
  report.threads = options.threads;
  report.intra_op = options.intra_op;
  report.warm_passes = options.warm_passes;
  report.iters = options.iters;
  report.warmup = options.warmup;
  // One intra-op thread unless asked: planning covers the calling thread's allocations
  // (docs/TORCH_EXT.md), and the threads of a server are its inference threads.
  at::set_num_threads(options.intra_op);
  limit_openblas_threads(options.intra_op);

  check_file(options.model);
  torch::jit::ExtraFilesMap extra{{"input_shape", ""}, {"input_dtype", ""}, {"input_high", ""}};
  Clock::time_point start = Clock::now();
  std::optional<Progress> progress;
  const bool tuned_kernels = options.kernels == Kernels::kTuned;
  progress.emplace("loading " + options.model + (tuned_kernels ? " three times" : " twice"), 0,
                   options.progress);
  torch::jit::Module unplanned = load(options.model, &extra);
  torch::jit::Module planned = load(options.model, nullptr);
  std::optional<torch::jit::Module> tuned;
  if (tuned_kernels) tuned = load(options.model, nullptr);
  progress->finish();
  report.load_ms = ms_since(start);

  const InputSpec spec = input_spec(options, extra);
  report.input = spec_shape_text(spec);
  report.dtype = spec.dtype;
  report.seed = options.seed;
  report.draw = options.draw;
  report.varying = spec.varies();
  const InputSource source = input_source(spec, options.seed);
  // plan() gets pass 0's inputs, the warm-up and timed passes those from 1 on.
  const std::vector<c10::IValue> inputs = source(0);
  const torch_ext::PlanStats at_start = torch_ext::plan_stats();

  c10::InferenceMode inference;  // the plan's key includes it: the workers run in it too
  try {
    unplanned.forward(inputs);  // the input fits before anything is planned
  } catch (const std::exception& e) {
    throw BadInput(options.model + " does not run on input " + report.input + " " + report.dtype +
                   ": " + one_line(e));
  }
  torch_ext::PlanOptions plan_options;
  plan_options.strategy = options.strategy;
  plan_options.memory = options.memory;
  torch_ext::PlanSummary summary;
  start = Clock::now();
  progress.emplace("planning (warm-up, profiled pass, " + options.strategy + ")", 0,
                   options.progress);
  try {
    summary = torch_ext::plan(planned, inputs, plan_options);
  } catch (const std::exception& e) {
    throw std::runtime_error("planning " + options.model + " failed: " + one_line(e));
  }
  progress->finish();
  report.plan_call_ms = ms_since(start);
  report.strategy = summary.strategy;
  report.slab_bytes = summary.slab_bytes;
  report.lower_bound_bytes = summary.lower_bound_bytes;
  report.offset_lower_bound_bytes = summary.offset_lower_bound_bytes;
  report.shared_tensors = summary.shared_tensors;
  report.planned_bytes = summary.planned_bytes;
  report.coalesced_bytes = summary.coalesced_bytes;
  report.memory = options.memory;
  report.planned_tensors = summary.planned_tensors;
  report.escaping_tensors = summary.escaping_tensors;
  report.planning_ms = summary.planning_ms;
  if (!options.heapmap.empty()) {
    write_heapmap(planned, summary, options, report);
    report.heapmap = options.heapmap;
  }
  if (!options.trace.empty()) write_profiled_trace(planned, summary, options);

  report.kernels = options.kernels;
  if (tuned) {
    progress.emplace("planning with tuned kernels (measuring each GEMM shape)", 0,
                     options.progress);
    plan_options.kernels = Kernels::kTuned;
    plan_options.release_weights = true;  // this copy is ours (released_weights.h)
    try {
      const torch_ext::PlanSummary tuned_summary = torch_ext::plan(*tuned, inputs, plan_options);
      report.tuned_slab_bytes = tuned_summary.slab_bytes;
      report.tuned_lower_bound_bytes = tuned_summary.lower_bound_bytes;
      report.tuned_offset_lower_bound_bytes = tuned_summary.offset_lower_bound_bytes;
      report.packed_weight_bytes = tuned_summary.packed_weight_bytes;
      report.plain_weight_bytes = tuned_summary.released_weight_bytes;
      report.plain_weight_resident_bytes = tuned_summary.released_weight_resident_bytes;
      report.flops = tuned_summary.coverage.flops;
      report.tuned_flops = tuned_summary.coverage.tuned_flops;
      for (const torch_ext::Coverage::Left& l : tuned_summary.coverage.left) {
        report.left_on_aten.push_back({l.op, l.reason, l.calls, l.flops});
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("planning " + options.model +
                               " with tuned kernels failed: " + one_line(e));
    }
    progress->finish();
    report.kernel_report = torch_ext::kernel_report();
  }
  std::optional<torch::jit::Module> budgeted;
  if (!options.budget.empty()) {
    progress.emplace(
        "planning under the budget " + options.budget + " (weights to a file-backed mapping)", 0,
        options.progress);
    budgeted = load(options.model, nullptr);
    plan_budgeted(*budgeted, inputs, options, summary.slab_bytes, report);
    progress->finish();
  }
  measure(unplanned, planned, tuned ? &*tuned : nullptr, budgeted ? &*budgeted : nullptr, source, 1,
          options, report);
  if (budgeted) {
    sample_budgeted(*budgeted, source,
                    1 + static_cast<uint64_t>(options.threads) * options.warmup + options.iters,
                    report);
  }

  const torch_ext::PlanStats run = torch_ext::plan_stats() - at_start;
  report.profiled_passes = run.profiled_passes;
  report.family_plans = run.family_plans;
  report.slab_bytes_max = run.slab_bytes_max;
  // The shapes drawn, and the lower bound of the largest (most elements): its plan's, made now if
  // the run has none (predicted from the family, or profiled).
  const uint64_t passes = 1 + static_cast<uint64_t>(options.threads) * options.warmup +
                          static_cast<uint64_t>(options.iters);
  std::set<std::vector<int64_t>> shapes;
  std::vector<int64_t> largest = spec.shape;
  for (uint64_t i = 0; i < passes; ++i) {
    const std::vector<int64_t> shape = draw_shape(spec, options.seed, i);
    if (shapes.insert(shape).second && elements(shape) > elements(largest)) largest = shape;
  }
  report.distinct_shapes = shapes.size();
  report.largest_shape = shape_text(largest);
  report.lower_bound_bytes_max = report.lower_bound_bytes;
  if (spec.varies()) {
    InputSpec top = spec;
    top.shape = largest;
    top.high_shape.clear();
    torch_ext::PlanOptions largest_options;
    largest_options.strategy = options.strategy;
    largest_options.memory = options.memory;
    try {
      report.lower_bound_bytes_max =
          torch_ext::plan(planned, {make_input(top)}, largest_options).lower_bound_bytes;
    } catch (const std::exception& e) {
      throw std::runtime_error("planning the largest shape " + report.largest_shape +
                               " failed: " + one_line(e));
    }
  }
  return report;
}

void run_rss_probe(const RunOptions& options) {
  at::set_num_threads(options.intra_op);
  limit_openblas_threads(options.intra_op);
  check_file(options.model);
  // The process before the model: the runtime's own share of the peak (LibTorch alone is ~190 MB).
  const uint64_t runtime_bytes = status_bytes("VmRSS");
  torch::jit::ExtraFilesMap extra{{"input_shape", ""}, {"input_dtype", ""}, {"input_high", ""}};
  torch::jit::Module module = load(options.model, &extra);
  const InputSpec spec = input_spec(options, extra);
  const InputSource source = input_source(spec, options.seed);
  c10::InferenceMode inference;
  if (options.rss_probe == "planned" || options.rss_probe == "tuned") {
    torch_ext::PlanOptions plan_options;
    plan_options.strategy = options.strategy;
    plan_options.memory = options.memory;
    if (options.rss_probe == "tuned") {
      plan_options.kernels = Kernels::kTuned;
      plan_options.release_weights = true;
    }
    torch_ext::plan(module, source(0), plan_options);
  }
  // The run's passes, with the run's inputs: each thread its warm-up, then the timed ones shared
  // out.
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      c10::InferenceMode guard;
      for (int i = 0; i < options.warmup; ++i) {
        module.forward(source(1 + static_cast<uint64_t>(t) * options.warmup + i));
      }
      for (int k; (k = next.fetch_add(1)) < options.iters;) {
        module.forward(source(1 + static_cast<uint64_t>(options.threads) * options.warmup +
                              static_cast<uint64_t>(k)));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // VmHWM, the peak of this process's own memory: ru_maxrss would not do, Linux carries it across
  // exec (a probe spawned by a run that holds two copies of the model would report the run's).
  const uint64_t peak_bytes = status_bytes("VmHWM");
  if (peak_bytes == 0 || runtime_bytes == 0) {
    throw std::runtime_error("cannot read VmRSS and VmHWM from /proc/self/status");
  }
  std::printf("runtime_rss_bytes %llu peak_rss_bytes %llu\n",
              static_cast<unsigned long long>(runtime_bytes),
              static_cast<unsigned long long>(peak_bytes));
}

}  // namespace memoplan::run

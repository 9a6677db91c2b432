#include "session_common.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>

#include "memoplan/process_status.h"
#include "memoplan/torch/fuser.h"
#include "session.h"  // BadInput

namespace memoplan::run {
namespace {

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

// Shapes that vary: pass `index` gets draw_shape(spec, seed, index) and values from a generator
// of its own (threads draw their inputs at once; the global one would interleave them).
at::Tensor make_input(const InputSpec& spec, uint64_t seed, uint64_t index) {
  const std::vector<int64_t> shape = draw_shape(spec, seed, index);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003 + index);
  const c10::ScalarType type = scalar_type(spec.dtype);
  if (integer_dtype(spec.dtype)) {
    return at::randint(0, spec.high, shape, generator, at::TensorOptions().dtype(type));
  }
  return at::randn(shape, generator).to(type);
}

uint64_t elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

// TorchScript errors carry the script's traceback first and the error last ("RuntimeError: ...");
// c10 errors their C++ backtrace after the first line.
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

void check_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw BadInput(path + ": no such file");
  if (S_ISDIR(st.st_mode)) throw BadInput(path + ": is a directory, not " + what);
}

// Debian's libblas.so.3 with libopenblas0-pthread keeps a pool of one thread per core and spins
// it after each call: "one intra-op thread" must mean one core for aten's BLAS calls too, or the
// stock passes would use every core while the planned and tuned ones use one.
void limit_openblas_threads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
}

std::string malloc_library() {
  Dl_info info{};
  void* address = dlsym(RTLD_DEFAULT, "malloc");
  if (!address || !dladdr(address, &info) || !info.dli_fname) return "?";
  const std::string path = info.dli_fname;
  return path.substr(path.rfind('/') + 1);
}

InputSpec run_input_spec(const RunOptions& options, const std::string& file_shape,
                         const std::string& file_dtype, const std::string& file_high) {
  Result<InputSpec> spec = make_input_spec(options.model, options.input, options.dtype, file_shape,
                                           file_dtype, file_high);
  if (!spec) throw BadInput(spec.error());
  const std::optional<Draw> draw = parse_draw(options.draw);
  if (!draw) throw BadInput("unknown --draw '" + options.draw + "' (uniform, lognormal)");
  spec->draw = *draw;
  return std::move(*spec);
}

// The same input for every pass of every copy: seeded, so every run feeds the same values.
static at::Tensor make_input(const InputSpec& spec) {
  at::manual_seed(0);
  const c10::ScalarType type = scalar_type(spec.dtype);
  if (integer_dtype(spec.dtype)) {
    return at::randint(0, spec.high, spec.shape, at::TensorOptions().dtype(type));
  }
  return at::randn(spec.shape).to(type);
}

InputSource input_source(const InputSpec& spec, uint64_t seed) {
  if (!spec.varies()) {
    std::vector<c10::IValue> fixed = {make_input(spec)};
    return [fixed](uint64_t) { return fixed; };
  }
  return [spec, seed](uint64_t index) {
    return std::vector<c10::IValue>{make_input(spec, seed, index)};
  };
}

void fill_run_fields(const RunOptions& options, const InputSpec& spec, RunReport& report) {
  report.malloc_library = malloc_library();
  report.fuser = torch_ext::fusing_on_cpu();
  report.fuser_on_cpu = torch_ext::fuses_on_cpu_by_default();
  report.model = options.model;
  report.threads = options.threads;
  report.intra_op = options.intra_op;
  report.warm_passes = options.warm_passes;
  report.block = options.block;
  report.iters = options.iters;
  report.warmup = options.warmup;
  report.input = spec_shape_text(spec);
  report.dtype = spec.dtype;
  report.seed = options.seed;
  report.draw = options.draw;
  report.varying = spec.varies();
  report.kernels = options.kernels;
  report.memory = options.memory;
}

void fill_plan_fields(const torch_ext::PlanSummary& summary, RunReport& report) {
  report.strategy = summary.strategy;
  report.executor = summary.executor;
  report.slab_bytes = summary.slab_bytes;
  report.lower_bound_bytes = summary.lower_bound_bytes;
  report.offset_lower_bound_bytes = summary.offset_lower_bound_bytes;
  report.shared_tensors = summary.shared_tensors;
  report.planned_bytes = summary.planned_bytes;
  report.coalesced_bytes = summary.coalesced_bytes;
  report.planned_tensors = summary.planned_tensors;
  report.escaping_tensors = summary.escaping_tensors;
  report.planning_ms = summary.planning_ms;
}

void record_shapes(const InputSpec& spec, const RunOptions& options,
                   const torch_ext::PlanStats& at_start,
                   const std::function<uint64_t(const std::vector<c10::IValue>&)>& lower_bound_of,
                   RunReport& report) {
  const torch_ext::PlanStats run = torch_ext::plan_stats() - at_start;
  report.profiled_passes = run.profiled_passes;
  report.family_plans = run.family_plans;
  report.slab_bytes_max = run.slab_bytes_max;
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
  if (!spec.varies()) return;
  // Its plan's bound, made now if the run has none (predicted from the family, or profiled).
  InputSpec top = spec;
  top.shape = largest;
  top.high_shape.clear();
  try {
    report.lower_bound_bytes_max = lower_bound_of({make_input(top)});
  } catch (const std::exception& e) {
    throw std::runtime_error("planning the largest shape " + report.largest_shape +
                             " failed: " + one_line(e));
  }
}

void probe_passes(const RunOptions& options, const InputSource& source, const Pass& pass,
                  uint64_t runtime_bytes) {
  // The run's passes, with the run's inputs: each thread its warm-up, then the timed ones shared
  // out.
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      c10::InferenceMode guard;
      for (int i = 0; i < options.warmup; ++i) {
        pass(source(1 + static_cast<uint64_t>(t) * options.warmup + i));
      }
      for (int k; (k = next.fetch_add(1)) < options.iters;) {
        pass(source(1 + static_cast<uint64_t>(options.threads) * options.warmup +
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

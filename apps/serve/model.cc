#include "model.h"

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "http_error.h"
#include "memoplan/torch/aoti_package.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/call_plan.h"
#include "memoplan/torch/plan.h"

namespace memoplan::serve {
namespace {

at::ScalarType scalar_type(DataType type) {
  switch (type) {
    case DataType::kBool:
      return at::kBool;
    case DataType::kUint8:
      return at::kByte;
    case DataType::kInt8:
      return at::kChar;
    case DataType::kInt16:
      return at::kShort;
    case DataType::kInt32:
      return at::kInt;
    case DataType::kInt64:
      return at::kLong;
    case DataType::kFp16:
      return at::kHalf;
    case DataType::kBf16:
      return at::kBFloat16;
    case DataType::kFp32:
      return at::kFloat;
    case DataType::kFp64:
      return at::kDouble;
  }
  throw std::logic_error("unknown datatype");
}

DataType datatype_of(at::ScalarType type, const std::string& output) {
  for (int i = 0; i <= static_cast<int>(DataType::kFp64); ++i) {
    if (scalar_type(static_cast<DataType>(i)) == type) return static_cast<DataType>(i);
  }
  throw HttpError(500, "output '" + output + "' has dtype " + std::string(c10::toString(type)) +
                           ", which the protocol cannot carry");
}

// c10::Error's what() carries a C++ backtrace: clients get the message only.
std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

at::Tensor to_tensor(const HostTensor& host) {
  at::Tensor t = at::empty(host.shape, at::TensorOptions().dtype(scalar_type(host.datatype)));
  if (!host.bytes.empty()) std::memcpy(t.data_ptr(), host.bytes.data(), host.bytes.size());
  return t;
}

HostTensor to_host(std::string name, at::Tensor t) {
  HostTensor host;
  host.datatype = datatype_of(t.scalar_type(), name);
  host.name = std::move(name);
  t = t.cpu().contiguous();
  host.shape.assign(t.sizes().begin(), t.sizes().end());
  host.bytes.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return host;
}

// Forward's result as named tensors: a tensor is output__0, a tuple or list output__0..k-1 (the
// names Triton's PyTorch backend uses), a dict of tensors keeps its keys. None elements (a
// scripted googlenet's auxiliary outputs in eval mode) are left out; the others keep their index.
std::vector<HostTensor> outputs_of(const c10::IValue& result) {
  std::vector<HostTensor> outputs;
  auto unsupported = [&] {
    return HttpError(500, "the model returned " + result.tagKind() +
                              "; the server sends tensors, tuples, lists or dicts of tensors");
  };
  auto add = [&](std::string name, const c10::IValue& v) {
    if (v.isNone()) return;
    if (!v.isTensor()) throw unsupported();
    outputs.push_back(to_host(std::move(name), v.toTensor()));
  };
  auto positional = [&](size_t i) { return "output__" + std::to_string(i); };
  if (result.isTensor()) {
    add(positional(0), result);
  } else if (result.isTuple()) {
    const auto& elements = result.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) add(positional(i), elements[i]);
  } else if (result.isList()) {
    const c10::List<c10::IValue> list = result.toList();
    for (size_t i = 0; i < list.size(); ++i) add(positional(i), list.get(i));
  } else if (result.isGenericDict()) {
    for (const auto& entry : result.toGenericDict()) {
      if (!entry.key().isString()) throw unsupported();
      add(entry.key().toStringRef(), entry.value());
    }
  } else {
    throw unsupported();
  }
  return outputs;
}

}  // namespace

struct Model::Impl {
  ModelOptions options;
  torch::jit::Module module;
  // An AOTInductor package instead of `module` (a .pt2 file): its run() planned as one call.
  std::unique_ptr<torch_ext::AotiPackage> package;
  std::unique_ptr<torch_ext::PlannedCall> call;  // with `package`, when planned
  std::vector<InputDefault> defaults;  // empty: none known

  std::atomic<bool> planned{false};
  std::atomic<bool> outputs_known{false};
  mutable std::mutex mutex;  // guards spec's outputs and first-request planning
  ModelSpec spec;
  // spec's runs_on: its own lock (plan() may run under `mutex`).
  mutable std::mutex runs_on_mutex;
  RunsOn runs_on;

  void set_runs_on(const char* plan, const std::string& kernels, const torch_ext::PlanSummary& s,
                   uint64_t budget_bytes, const std::string& fallback) {
    std::lock_guard<std::mutex> lock(runs_on_mutex);
    runs_on.plan = plan;
    runs_on.budget_bytes = budget_bytes;
    runs_on.kernels_fallback = fallback;
    if (runs_on.plan == "planned") {
      runs_on.kernels = kernels;
      runs_on.memory = options.memory;
    }
    if (s.coverage.measured) runs_on.tuned_flops_fraction = s.coverage.tuned_flops_fraction();
  }

  // One pass: the module's forward (planned once plan() rewrote it), or the package's run() (as
  // a planned call when planned).
  c10::IValue forward(const std::vector<c10::IValue>& inputs) {
    if (!package) return module.forward(inputs);
    if (!call) return package->run(inputs);
    return call->run(inputs, [&] { return package->run(inputs); });
  }

  // A package: its run() planned as one call, kernels stock and memory offset (Inductor's
  // kernels; the options a graph rewrite gives are refused at load).
  void plan_package(const std::vector<c10::IValue>& inputs) {
    torch_ext::PlanOptions plan_options;
    plan_options.strategy = options.strategy;
    call = std::make_unique<torch_ext::PlannedCall>(plan_options);
    const torch_ext::PlanSummary s = call->plan(inputs, [&] { return package->run(inputs); });
    const bool asked = options.kernels != "auto";
    set_runs_on("planned", "stock", s, 0,
                asked ? "" : "an AOTInductor package runs Inductor's kernels");
    planned.store(true, std::memory_order_release);
    summary = "planned the package's run() as one call: slab " + std::to_string(s.slab_bytes) +
              " bytes (lower bound " + std::to_string(s.lower_bound_bytes) + "), " +
              std::to_string(s.planned_tensors) + " planned tensors per pass, " + s.strategy +
              " in " + c10::str(s.planning_ms) + " ms";
  }

  void plan(const std::vector<c10::IValue>& inputs) {
    if (!options.plan) {
      set_runs_on("unplanned", "", {}, 0, "");
      planned.store(true, std::memory_order_release);
      summary = "not planned (--no-plan): the process's allocator serves every tensor";
      return;
    }
    if (package) return plan_package(inputs);
    if (options.kernels != "auto") return plan_with(options.kernels, inputs, "");
    // The default: the tuned kernels (each op on memoplan's or oneDNN's kernel where it measured
    // faster, aten's elsewhere), stock under a budget. Where the tuned plan fails (its library
    // missing, its weights directory not writable, ...) the file is loaded again and planned
    // stock; the log and the metadata say why.
    if (!options.budget.empty()) return plan_with("stock", inputs, "");
    try {
      return plan_with("tuned", inputs, "");
    } catch (const std::exception& e) {
      const std::string why = message_of(e);
      try {
        torch_ext::forget_module(module);
      } catch (const std::exception&) {
      }
      module = torch::jit::load(options.path);
      module.eval();
      plan_with("stock", inputs, "the tuned kernels failed: " + why);
    }
  }

  // Plans the module with `kernels` ("stock" or "tuned"); `fallback`: why not the default's.
  void plan_with(const std::string& kernels, const std::vector<c10::IValue>& inputs,
                 const std::string& fallback) {
    torch_ext::PlanOptions plan_options;
    plan_options.strategy = options.strategy;
    plan_options.kernels = torch_ext::parse_kernels(kernels).value();  // checked by config
    plan_options.memory = torch_ext::parse_memory(options.memory).value();
    plan_options.release_weights = plan_options.kernels == torch_ext::Kernels::kTuned;
    const std::optional<torch_ext::BudgetText> budget =
        torch_ext::parse_budget(options.budget);  // checked by config
    // A share of the weights plus the slab is known once planned: planned under a budget that
    // holds everything, then set to the share (set_budget runs no pass).
    constexpr uint64_t kEverything = uint64_t{1} << 40;
    if (budget) plan_options.budget_bytes = budget->bytes ? budget->bytes : kEverything;
    const torch_ext::PlanSummary s = torch_ext::plan(module, inputs, plan_options);
    uint64_t budget_bytes = plan_options.budget_bytes;
    if (budget && budget->percent > 0) {
      const uint64_t weights = torch_ext::budget_summary(module)->weights_bytes;
      budget_bytes = static_cast<uint64_t>(static_cast<double>(weights + s.slab_bytes) *
                                           budget->percent / 100);
      torch_ext::set_budget(module, budget_bytes);  // BudgetTooSmall: the load fails, saying so
    }
    set_runs_on("planned", kernels, s, budget_bytes, fallback);
    planned.store(true, std::memory_order_release);
    std::string shapes;
    for (const c10::IValue& v : inputs) {
      if (!v.isTensor()) continue;
      shapes += (shapes.empty() ? "" : ", ") + c10::str(v.toTensor().sizes());
    }
    summary = "planned " + shapes + ": slab " + std::to_string(s.slab_bytes) +
              " bytes (lower bound " + std::to_string(s.lower_bound_bytes) + "), " +
              std::to_string(s.planned_tensors) + " planned tensors per pass, " + s.strategy +
              " in " + c10::str(s.planning_ms) + " ms, kernels " + kernels + ", memory " +
              options.memory;
    if (!fallback.empty()) summary += " (" + fallback + ")";
    if (budget) summary += ", budget " + std::to_string(budget_bytes) + " bytes";
    if (s.coverage.measured) {
      summary += ", tuned FLOPs " + c10::str(s.coverage.tuned_flops_fraction()) +
                 ", packed weights " + std::to_string(s.packed_weight_bytes) + " bytes";
    }
  }

  // Records the outputs' names, datatypes and shapes for the metadata (and the inputs' datatypes
  // and ranks when there is no default input). With a default input the dimension 0 of an
  // output as large as the input's dimension 0 is the batch: -1.
  void learn_signature(const std::vector<HostTensor>& inputs,
                       const std::vector<HostTensor>& outputs) {
    std::lock_guard<std::mutex> lock(mutex);
    if (outputs_known.load()) return;
    for (size_t i = 0; i < inputs.size() && i < spec.inputs.size(); ++i) {
      if (!spec.inputs[i].unchecked) continue;
      spec.inputs[i].datatype = inputs[i].datatype;
      spec.inputs[i].shape.assign(inputs[i].shape.size(), -1);
    }
    for (const HostTensor& out : outputs) {
      TensorSpec t{out.name, out.datatype, out.shape};
      for (size_t d = 0; d < t.shape.size(); ++d) {
        const bool batch = d == 0 && !package && !defaults.empty() && !defaults[0].shape.empty() &&
                           t.shape[0] == defaults[0].shape[0];
        if (defaults.empty() || batch) t.shape[d] = -1;
      }
      spec.outputs.push_back(std::move(t));
    }
    outputs_known.store(true);
  }

  std::string summary;

  // The constructor's part for each kind of file: fills spec.inputs and the file's own default
  // input ("input_shape", "input_dtype": extra files of a TorchScript file, a package's metadata).
  void load_script(std::string& file_shape, std::string& file_dtype);
  void load_package(std::string& file_shape, std::string& file_dtype);
};

// A TorchScript file: forward's tensor arguments are the inputs, in order.
void Model::Impl::load_script(std::string& file_shape, std::string& file_dtype) {
  torch::jit::ExtraFilesMap extra{{"input_shape", ""}, {"input_dtype", ""}};
  try {
    module = torch::jit::load(options.path, c10::nullopt, extra);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot load " + options.path + ": " + message_of(e));
  }
  module.eval();
  if (!module.find_method("forward")) throw std::runtime_error(options.path + " has no forward");
  file_shape = extra["input_shape"];
  file_dtype = extra["input_dtype"];

  // The inputs: forward's tensor arguments, in order. Other arguments must have defaults and
  // come after them (the server passes the tensors positionally).
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  bool past_tensors = false;
  for (size_t i = 1; i < schema.arguments().size(); ++i) {  // 0 is self
    const c10::Argument& arg = schema.arguments()[i];
    const bool tensor = arg.type()->kind() == c10::TypeKind::TensorType;
    if (tensor && !past_tensors) {
      spec.inputs.push_back({arg.name(), DataType::kFp32, {-1}, true});
    } else if (!arg.default_value()) {
      throw std::runtime_error("forward argument '" + arg.name() + "' (" + arg.type()->str() +
                               ") has no default: the server passes tensors only");
    } else {
      past_tensors = true;
    }
  }
}

// An AOTInductor package (LibTorch >= 2.6): run()'s tensors are the inputs, input__0..k-1 (the
// export keeps no names). Kernels stock and memory offset: the other options rewrite a graph.
void Model::Impl::load_package(std::string& file_shape, std::string& file_dtype) {
  if (!torch_ext::aoti_supported()) {
    throw std::runtime_error(torch_ext::aoti_package_unsupported(options.path));
  }
  if (options.plan && ((options.kernels != "auto" && options.kernels != "stock") ||
                       options.memory != "offset" || !options.budget.empty())) {
    throw std::runtime_error(
        options.path + ": an AOTInductor package runs Inductor's kernels and is planned with "
        "kernels \"stock\" (or \"auto\") and memory \"offset\", without a budget (the others "
        "rewrite a TorchScript graph)");
  }
  // says why it cannot; a model per worker, on the same constants
  package = std::make_unique<torch_ext::AotiPackage>(
      options.path, static_cast<size_t>(options.workers > 1 ? options.workers : 1));
  for (size_t i = 0; i < package->input_count(); ++i) {
    spec.inputs.push_back({"input__" + std::to_string(i), DataType::kFp32, {-1}, true});
  }
  file_shape = package->metadata("input_shape");
  file_dtype = package->metadata("input_dtype");
}

Model::Model(const ModelOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  m.spec.name = options.name;
  std::string file_shape, file_dtype;
  if (torch_ext::is_aoti_package(options.path)) {
    m.load_package(file_shape, file_dtype);
  } else {
    m.load_script(file_shape, file_dtype);
  }
  m.defaults = options.inputs;
  if (m.defaults.empty() && !file_shape.empty() && m.spec.inputs.size() == 1) {
    m.defaults.push_back(parse_input_default(file_shape));
    if (!file_dtype.empty()) {
      const std::optional<DataType> type = datatype_of_torch_name(file_dtype);
      if (!type) throw std::runtime_error("unsupported input_dtype " + file_dtype);
      m.defaults[0].datatype = *type;
    }
  }
  // AOTInductor checks no input shape (only a debug compile does): a request larger than the
  // export's would be read past its end. A package is served only with its shapes known, and
  // every request is checked against them.
  if (m.package && m.defaults.empty()) {
    throw std::runtime_error(
        options.path + ": the package's input shapes are not known, and AOTInductor does not "
        "check them: export it with inductor_configs={\"aot_inductor.metadata\": "
        "{\"input_shape\": \"1x3x224x224\", \"input_dtype\": \"float32\"}} or give them "
        "(--input, or \"inputs\" in config.json)");
  }
  if (!m.defaults.empty() && m.defaults.size() != m.spec.inputs.size()) {
    throw std::runtime_error(std::to_string(m.defaults.size()) + " --input given, forward takes " +
                             std::to_string(m.spec.inputs.size()) + " tensor(s)");
  }
  for (size_t i = 0; i < m.defaults.size(); ++i) {
    TensorSpec& in = m.spec.inputs[i];
    in.datatype = m.defaults[i].datatype;
    in.shape = m.defaults[i].shape;
    in.unchecked = false;
    // The batch: plans are made per shape as they come. A package's shapes are as exported (its
    // metadata cannot say which dims vary): requests must match them.
    if (!in.shape.empty() && !m.package) in.shape[0] = -1;
  }
}

Model::~Model() {
  if (impl_->options.plan && !impl_->package) torch_ext::forget_module(impl_->module);
  impl_.reset();  // the module, its weights and graphs
  torch_ext::release_free_memory();
}

std::string Model::prepare() {
  Impl& m = *impl_;
  // The workers' setting (it is part of the plan's key), set as a worker sets it: a model loaded
  // while others serve is planned on a thread of the server's.
  init_worker_thread();
  if (m.defaults.empty()) return "no default input: the first request's inputs are planned";
  c10::InferenceMode guard;
  std::vector<c10::IValue> inputs;
  for (const InputDefault& d : m.defaults) {
    // Ones: a valid index for embeddings, a valid value for everything else.
    inputs.emplace_back(at::ones(d.shape, at::TensorOptions().dtype(scalar_type(d.datatype))));
  }
  try {
    // The outputs from an unplanned pass first: a planned pass on this thread would give it a
    // slab it keeps for good, and it serves no requests.
    m.learn_signature({}, outputs_of(m.forward(inputs)));
    m.plan(inputs);
  } catch (const HttpError&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("planning the default input failed: " + message_of(e));
  }
  return m.summary;
}

// OpenMP's per-thread count; libgomp comes with LibTorch (weak: resolved where it is loaded).
extern "C" void omp_set_num_threads(int) __attribute__((weak));

void Model::init_worker_thread() {
  // at::set_num_threads also resets process-wide state (the thread pool size, oneDNN's caches),
  // which must not happen while another worker (another model's, in a repository) runs a
  // forward call: only the first worker of the process calls it, later ones set their own
  // OpenMP count, the only part that is per thread.
  static std::atomic<bool> first{true};
  if (first.exchange(false) || !omp_set_num_threads) {
    at::set_num_threads(1);
  } else {
    omp_set_num_threads(1);
  }
}

std::vector<HostTensor> Model::infer(const std::vector<HostTensor>& inputs) {
  Impl& m = *impl_;
  c10::InferenceMode guard;
  std::vector<c10::IValue> values;
  values.reserve(inputs.size());
  for (const HostTensor& h : inputs) values.emplace_back(to_tensor(h));
  try {
    if (!m.planned.load(std::memory_order_acquire)) {
      // No default input: the first request is planned, while the other workers wait (plan()
      // replaces forward, which must not run meanwhile).
      std::lock_guard<std::mutex> lock(m.mutex);
      if (!m.planned.load()) m.plan(values);
    }
    std::vector<HostTensor> outputs = outputs_of(m.forward(values));
    if (!m.outputs_known.load(std::memory_order_acquire)) m.learn_signature(inputs, outputs);
    return outputs;
  } catch (const HttpError&) {
    throw;
  } catch (const std::exception& e) {
    throw bad_request("inference failed: " + message_of(e));
  }
}

ModelMemory Model::memory() const {
  torch_ext::ModuleMemory m;
  if (!impl_->package) {
    m = torch_ext::module_memory(impl_->module);
  } else {
    if (impl_->call) m = impl_->call->memory();
    // A package's constants are not storages memoplan can see: their bytes in its library.
    m.weight_resident_bytes = impl_->package->weight_bytes();
  }
  return {m.weight_resident_bytes, m.packed_weight_bytes, m.slab_bytes, m.plan_slab_bytes};
}

ModelSpec Model::spec() const {
  ModelSpec spec;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    spec = impl_->spec;
  }
  std::lock_guard<std::mutex> lock(impl_->runs_on_mutex);
  spec.runs_on = impl_->runs_on;
  return spec;
}

}  // namespace memoplan::serve

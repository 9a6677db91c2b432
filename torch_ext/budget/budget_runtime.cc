#include "budget_runtime.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <sys/stat.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "budget_graph.h"
#include "memoplan/planner/budget.h"
#include "weight_file.h"

namespace memoplan::torch_ext::budget {
namespace {

// The largest number of slices a linear's weight of `rows` output rows may be cut in: a power of
// two dividing the rows, each slice at least 64 rows, at most 64 slices.
uint32_t max_slices(int64_t rows) {
  uint32_t slices = 1;
  while (slices < 64 && rows % (2 * slices) == 0 && rows / (2 * slices) >= 64) slices *= 2;
  return slices;
}

// The most slices (a power of two up to `most`) whose products equal the whole weight's bit for
// bit on a random row, with and without a bias, as budget_linear computes them: BLAS kernels are
// picked by shape, and a slice's shape may get another rounding (measured on OpenBLAS: a
// 1024 x 1024 weight's 64-row slices differ in the last bits).
uint32_t identical_slices(const at::Tensor& weight, uint32_t most) {
  // A generator of its own: planning leaves the program's random stream as it was.
  at::Generator generator = at::detail::createCPUGenerator(0x6d656d6f);
  const at::Tensor row = at::randn({1, weight.size(1)}, generator);
  const at::Tensor bias = at::randn({weight.size(0)}, generator);
  const at::Tensor whole = at::mm(row, weight.t());
  const at::Tensor whole_bias = at::addmm(bias, row, weight.t());
  uint32_t fits = 1;
  for (uint32_t slices = 2; slices <= most; slices *= 2) {
    const int64_t per = weight.size(0) / slices;
    at::Tensor out = at::empty(whole.sizes(), whole.options());
    at::Tensor out_bias = at::empty(whole.sizes(), whole.options());
    for (uint32_t s = 0; s < slices; ++s) {
      const at::Tensor w = weight.narrow(0, s * per, per).t();
      at::Tensor o = out.narrow(1, s * per, per), ob = out_bias.narrow(1, s * per, per);
      at::mm_out(o, row, w);
      at::addmm_out(ob, bias.narrow(0, s * per, per), row, w);
    }
    if (!at::equal(out, whole) || !at::equal(out_bias, whole_bias)) break;
    fits = slices;
  }
  return fits;
}

struct Schedule {
  planner::BudgetPlan plan;
  std::vector<std::vector<uint32_t>> load_at, release_at;  // per step 0..steps
  uint64_t generation = 0;
};

std::string default_dir() {
  if (const char* dir = std::getenv("MEMOPLAN_WEIGHTS_DIR"); dir && *dir) return dir;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return std::string(cache) + "/memoplan/weights";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/memoplan/weights";
  return "/tmp/memoplan-weights";
}

void make_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at == dir.size() || dir[at] == '/') ::mkdir(dir.substr(0, at).c_str(), 0755);
  }
}

class State {
 public:
  std::shared_ptr<WeightFile> file;
  planner::BudgetProblem problem;
  std::vector<uint64_t> linear_bytes;  // per group: its sliceable weight's bytes, else 0
  // Per on-demand group: the most of it a pass touched (measured at its release), else 0.
  std::vector<std::atomic<uint64_t>> touched;
  uint64_t budget_bytes = 0;
  BudgetSummary last;

  State() : loader_([this] { load_loop(); }) {}
  ~State() {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stop_ = true;
    }
    queue_cv_.notify_all();
    loader_.join();
  }

  void install(std::shared_ptr<const Schedule> schedule) {
    std::lock_guard<std::mutex> lock(schedule_mutex_);
    schedule_ = std::move(schedule);
  }

  void step(uint32_t s) {
    std::shared_ptr<const Schedule> pass;
    {
      std::lock_guard<std::mutex> lock(schedule_mutex_);
      if (s == 0 || !pass_) start_pass();
      pass = pass_;
    }
    const Schedule& schedule = *pass;
    if (sampling.load(std::memory_order_relaxed)) sample();
    if (s < schedule.release_at.size()) {
      for (uint32_t g : schedule.release_at[s]) release(g);
    }
    if (s < schedule.load_at.size()) {
      for (uint32_t g : schedule.load_at[s]) {
        if (problem_on_demand(g)) continue;  // its lookups fault in what they touch
        const uint32_t slices = schedule.plan.slices[g];
        const uint64_t bytes = slices > 1 ? linear_bytes[g] / slices : file->group_bytes(g);
        want(g, 0, bytes);
      }
    }
  }

  int slices(size_t g) {
    std::lock_guard<std::mutex> lock(schedule_mutex_);
    return pass_ ? static_cast<int>(pass_->plan.slices[g]) : 1;
  }
  void want(size_t g, uint64_t offset, uint64_t bytes) {
    uint64_t epoch;
    {
      std::lock_guard<std::mutex> lock(group_mutex_[g]);
      wanted_[g] = 1;
      epoch = epoch_[g];
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.push_back({g, offset, bytes, epoch});
    }
    queue_cv_.notify_one();
  }
  void drop_part(size_t g, uint64_t offset, uint64_t bytes) {
    if (sampling.load(std::memory_order_relaxed)) sample();
    std::lock_guard<std::mutex> lock(group_mutex_[g]);
    file->drop(file->group_offset(g) + offset, bytes);
    dropped_upto_[g] = std::max(dropped_upto_[g], offset + bytes);
  }
  void sample() {
    const uint64_t resident = file->resident_bytes();
    uint64_t seen = peak.load(std::memory_order_relaxed);
    while (resident > seen && !peak.compare_exchange_weak(seen, resident)) {
    }
  }

  std::atomic<bool> sampling{false};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> peak{0};

  void init_groups(size_t n) {
    touched = std::vector<std::atomic<uint64_t>>(n);
    on_demand_.assign(n, 0);
    for (size_t g = 0; g < n; ++g) on_demand_[g] = problem.groups[g].on_demand;
    group_mutex_ = std::vector<std::mutex>(n);
    dropped_upto_.assign(n, 0);
    epoch_.assign(n, 0);
    wanted_.assign(n, 0);
    pinned_now_.assign(n, 0);
  }

 private:
  struct Load {
    size_t group;
    uint64_t offset, bytes;
    uint64_t epoch;  // the group's epoch when asked for
  };

  // A new schedule takes effect at a pass's start: newly pinned groups load, unpinned ones drop.
  // Under schedule_mutex_.
  void start_pass() {
    std::shared_ptr<const Schedule> schedule = schedule_;
    if (pass_ && pass_->generation == schedule->generation) return;
    for (size_t g = 0; g < pinned_now_.size(); ++g) {
      const bool pin = schedule->plan.pinned[g];
      if (pin && !pinned_now_[g]) want(g, 0, file->group_bytes(g));
      if (!pin && pinned_now_[g]) release(g);
      pinned_now_[g] = pin;
    }
    pass_ = std::move(schedule);
  }

  bool problem_on_demand(size_t g) const { return on_demand_[g]; }

  void release(size_t g) {
    if (on_demand_[g]) {
      const uint64_t seen = file->resident_bytes(file->group_offset(g), file->group_bytes(g));
      uint64_t most = touched[g].load(std::memory_order_relaxed);
      while (seen > most && !touched[g].compare_exchange_weak(most, seen)) {
      }
    }
    std::lock_guard<std::mutex> lock(group_mutex_[g]);
    wanted_[g] = 0;
    dropped_upto_[g] = 0;
    ++epoch_[g];  // loads still queued for this use of g are void
    file->drop(file->group_offset(g), file->group_bytes(g));
  }

  void load_loop() {
    for (;;) {
      Load load;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        load = queue_.front();
        queue_.pop_front();
      }
      std::lock_guard<std::mutex> lock(group_mutex_[load.group]);
      // A slice already computed and dropped (the loader ran late) stays dropped.
      // A load from an earlier use of the group (the loader ran a pass late), or of a slice
      // already computed and dropped, is not made.
      if (wanted_[load.group] && load.epoch == epoch_[load.group] &&
          load.offset + load.bytes > dropped_upto_[load.group]) {
        file->populate(file->group_offset(load.group) + load.offset, load.bytes);
      }
    }
  }

  std::mutex schedule_mutex_;
  std::shared_ptr<const Schedule> schedule_;
  // Under schedule_mutex_: the schedule of the pass running, and the groups it pinned.
  std::shared_ptr<const Schedule> pass_;
  std::vector<uint8_t> pinned_now_;
  std::vector<uint8_t> on_demand_;
  std::vector<std::mutex> group_mutex_;
  std::vector<uint8_t> wanted_;  // under group_mutex_[g]
  // Under group_mutex_[g]: the end of the slices of g dropped this pass (0: none).
  std::vector<uint64_t> dropped_upto_;
  std::vector<uint64_t> epoch_;  // under group_mutex_[g]: its releases so far
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Load> queue_;
  bool stop_ = false;
  std::thread loader_;  // last: started once the rest is built
};

std::mutex states_mutex;
std::unordered_map<int64_t, std::shared_ptr<State>>& states() {
  static auto* map = new std::unordered_map<int64_t, std::shared_ptr<State>>();
  return *map;
}

std::shared_ptr<State> find(int64_t id) {
  std::lock_guard<std::mutex> lock(states_mutex);
  auto it = states().find(id);
  return it == states().end() ? nullptr : it->second;
}

std::shared_ptr<State> get(int64_t id) {
  std::shared_ptr<State> state = find(id);
  if (!state)
    throw std::runtime_error("memoplan: the module has no memory budget (plan() it with one)");
  return state;
}

std::shared_ptr<const Schedule> make_schedule(const planner::BudgetProblem& problem,
                                              planner::BudgetPlan plan, uint64_t generation) {
  auto schedule = std::make_shared<Schedule>();
  schedule->load_at.resize(problem.steps + 1);
  schedule->release_at.resize(problem.steps + 1);
  for (size_t g = 0; g < problem.groups.size(); ++g) {
    if (plan.pinned[g]) continue;
    schedule->load_at[plan.load_step[g]].push_back(static_cast<uint32_t>(g));
    schedule->release_at[problem.groups[g].last_step + 1].push_back(static_cast<uint32_t>(g));
  }
  schedule->plan = std::move(plan);
  schedule->generation = generation;
  return schedule;
}

// Streams every group at its first use, sliced as far as it may be: what runs before the
// activations are known.
planner::BudgetPlan streaming_plan(const planner::BudgetProblem& problem) {
  planner::BudgetPlan plan;
  for (const planner::WeightGroup& group : problem.groups) {
    plan.pinned.push_back(0);
    plan.load_step.push_back(group.first_step);
    plan.slices.push_back(group.max_slices);
  }
  return plan;
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

BudgetSummary plan_state(State& state, uint64_t budget_bytes) {
  const auto start = std::chrono::steady_clock::now();
  planner::BudgetProblem problem = state.problem;
  problem.budget_bytes = budget_bytes;
  // An on-demand group counts what passes touched of it (all of it before any was measured).
  for (size_t g = 0; g < problem.groups.size(); ++g) {
    const uint64_t touched = state.touched[g].load();
    if (problem.groups[g].on_demand && touched > 0) problem.groups[g].bytes = touched;
  }
  planner::BudgetPlan plan;
  try {
    plan = planner::plan_budget(problem);
  } catch (const planner::BudgetInfeasible& e) {
    throw BudgetTooSmall("memoplan: budget " + mib(budget_bytes) +
                             " is below the smallest feasible budget " + mib(e.smallest_bytes) +
                             " (" + std::to_string(e.smallest_bytes) + " bytes: activations " +
                             mib(problem.activation_bytes) +
                             " + the weights one layer reads, sliced as far as they may be)",
                         e.smallest_bytes);
  }
  BudgetSummary summary;
  summary.budget_bytes = budget_bytes;
  summary.weights_bytes = state.file->bytes();
  summary.activation_bytes = problem.activation_bytes;
  summary.pinned_bytes = plan.pinned_bytes;
  summary.streamed_bytes = plan.streamed_bytes;
  summary.planned_peak_bytes = plan.peak_bytes;
  summary.smallest_budget_bytes = plan.smallest_budget_bytes;
  summary.steps = problem.steps;
  summary.groups = static_cast<uint32_t>(problem.groups.size());
  for (uint32_t s : plan.slices) summary.sliced_groups += s > 1;
  summary.weight_file = state.file->path();
  static std::atomic<uint64_t> generations{1};
  state.install(make_schedule(problem, std::move(plan), generations.fetch_add(1)));
  state.problem.budget_bytes = budget_bytes;
  state.budget_bytes = budget_bytes;
  summary.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  state.last = summary;
  return summary;
}

}  // namespace

void prepare(torch::jit::Module& module, torch::jit::Graph& graph, int64_t id,
             uint64_t budget_bytes, const std::string& dir) {
  // Found on a copy: the module's graph changes only once the weights are in their file (a
  // directory that cannot be written leaves the module as it was).
  const BudgetGraph found = insert_budget_steps(*graph.copy(), id);
  // Storages, each in the window of every path that reads it; grouped by window.
  struct Found {
    c10::StorageImpl* storage;
    uint32_t first, last;
    bool linear;
    int64_t rows;
    at::Tensor tensor;
    bool gathered;
  };
  std::vector<Found> storages;
  std::unordered_map<c10::StorageImpl*, size_t> index;
  for (const WeightUse& use : found.weights) {
    c10::IValue value = module._ivalue();
    bool ok = true;
    for (const std::string& name : use.path) {
      if (!value.isObject() || !value.toObject()->type()->hasAttribute(name)) {
        ok = false;
        break;
      }
      value = value.toObject()->getAttr(name);
    }
    if (!ok || !value.isTensor()) continue;
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.has_storage()) continue;
    c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    if (storage->nbytes() == 0 || !storage->data()) continue;
    // A sliceable weight: the whole of its storage, rows contiguous.
    const bool linear = use.linear_weight && tensor.dim() == 2 && tensor.is_contiguous() &&
                        tensor.storage_offset() == 0 &&
                        static_cast<uint64_t>(tensor.nbytes()) == storage->nbytes() &&
                        tensor.scalar_type() == at::kFloat;
    auto [it, fresh] = index.emplace(storage, storages.size());
    if (fresh) {
      storages.push_back({storage, use.first_step, use.last_step, linear,
                          linear ? tensor.size(0) : 0, linear ? tensor : at::Tensor(),
                          use.gathered});
    } else {
      Found& f = storages[it->second];
      f.first = std::min(f.first, use.first_step);
      f.last = std::max(f.last, use.last_step);
      f.linear = false;  // read through two paths
      f.gathered = false;
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, std::vector<size_t>> windows;
  for (size_t i = 0; i < storages.size(); ++i) {
    windows[{storages[i].first, storages[i].last}].push_back(i);
  }
  auto state = std::make_shared<State>();
  std::vector<std::vector<c10::StorageImpl*>> groups;
  state->problem.steps = std::max<uint32_t>(found.steps, 1);
  state->problem.page_bytes = page_bytes();
  for (auto& [window, members] : windows) {
    // The sliceable weight first (at the group's start), and only one per group.
    std::stable_sort(members.begin(), members.end(),
                     [&](size_t a, size_t b) { return storages[a].linear > storages[b].linear; });
    size_t linears = 0, gathered = 0;
    for (size_t i : members) {
      linears += storages[i].linear;
      gathered += storages[i].gathered;
    }
    std::vector<c10::StorageImpl*> group;
    for (size_t i : members) group.push_back(storages[i].storage);
    groups.push_back(group);
    planner::WeightGroup weight_group;
    weight_group.first_step = window.first;
    weight_group.last_step = window.second;
    const bool sliceable = linears == 1 && window.first == window.second;
    weight_group.max_slices = sliceable ? identical_slices(storages[members[0]].tensor,
                                                           max_slices(storages[members[0]].rows))
                                        : 1;
    state->linear_bytes.push_back(sliceable ? storages[members[0]].storage->nbytes() : 0);
    weight_group.on_demand = !sliceable && gathered == members.size();
    state->problem.groups.push_back(weight_group);
  }
  const std::string where = dir.empty() ? default_dir() : dir;
  make_dirs(where);
  state->file = WeightFile::map(groups, where);
  insert_budget_steps(graph, id);  // the same steps: the copy was made from this graph
  for (size_t g = 0; g < groups.size(); ++g) {
    state->problem.groups[g].bytes = state->file->group_bytes(g);
  }
  state->init_groups(groups.size());
  state->budget_bytes = budget_bytes;
  state->problem.budget_bytes = budget_bytes;
  state->install(make_schedule(state->problem, streaming_plan(state->problem), 0));
  std::lock_guard<std::mutex> lock(states_mutex);
  states()[id] = std::move(state);
}

bool budgeted(int64_t id) { return find(id) != nullptr; }

// Weight pages the kernel maps beside a range we load (fault-around: 64 KiB windows, at both ends
// of each range being loaded): measured 60-100 KiB past the plan on vgg16 at a 10% budget.
constexpr uint64_t kFaultAroundSlack = 256 << 10;

BudgetSummary arm(int64_t id, uint64_t slab_bytes) {
  std::shared_ptr<State> state = get(id);
  state->problem.activation_bytes =
      std::max(state->problem.activation_bytes, slab_bytes + kFaultAroundSlack);
  return plan_state(*state, state->budget_bytes);
}

BudgetSummary replan(int64_t id, uint64_t budget_bytes) {
  return plan_state(*get(id), budget_bytes);
}

BudgetSummary summary(int64_t id) {
  std::shared_ptr<State> state = get(id);
  BudgetSummary summary = state->last;
  summary.slicing_refused = state->refused.load();
  return summary;
}

void set_sampling(int64_t id, bool on) { get(id)->sampling.store(on); }

uint64_t resident_peak(int64_t id, bool reset) {
  std::shared_ptr<State> state = get(id);
  return reset ? state->peak.exchange(0) : state->peak.load();
}

void drop_page_cache(int64_t id) { get(id)->file->drop_page_cache(); }

void step(int64_t id, int64_t s) {
  if (std::shared_ptr<State> state = find(id)) state->step(static_cast<uint32_t>(s));
}

Slicer slicer(int64_t id, const void* weight, uint64_t weight_bytes) {
  Slicer slicer;
  std::shared_ptr<State> state = find(id);
  if (!state) return slicer;
  const char* p = static_cast<const char*>(weight);
  const char* base = state->file->base();
  if (p < base || p >= base + state->file->bytes()) return slicer;
  const uint64_t offset = static_cast<uint64_t>(p - base);
  for (size_t g = 0; g < state->file->groups(); ++g) {
    if (state->file->group_offset(g) != offset) continue;
    if (state->linear_bytes[g] != weight_bytes) return slicer;
    slicer.slices = state->slices(g);
    slicer.state = state.get();  // the module (and its state) outlives its pass
    slicer.group = g;
    slicer.slice_bytes = weight_bytes / static_cast<uint64_t>(std::max(1, slicer.slices));
    break;
  }
  return slicer;
}

void Slicer::load(int slice) const {
  if (slice < slices) static_cast<State*>(state)->want(group, slice * slice_bytes, slice_bytes);
}

void Slicer::refused() const {
  static_cast<State*>(state)->refused.fetch_add(1, std::memory_order_relaxed);
}

uint64_t slicing_refused(int64_t id) { return get(id)->refused.load(); }

void Slicer::done(int slice) const {
  static_cast<State*>(state)->drop_part(group, slice * slice_bytes, slice_bytes);
}

}  // namespace memoplan::torch_ext::budget

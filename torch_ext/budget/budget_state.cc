#include "budget_state.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace memoplan::torch_ext::budget {

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

planner::BudgetPlan streaming_plan(const planner::BudgetProblem& problem) {
  planner::BudgetPlan plan;
  for (const planner::WeightGroup& group : problem.groups) {
    plan.pinned.push_back(0);
    plan.load_step.push_back(group.first_step);
    plan.slices.push_back(group.max_slices);
  }
  return plan;
}

BudgetState::BudgetState() : loader_([this] { load_loop(); }) {}

BudgetState::~BudgetState() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  loader_.join();
  if (arena_) ::munmap(arena_, arena_bytes_.load());
}

void BudgetState::init_groups(size_t n) {
  touched = std::vector<std::atomic<uint64_t>>(n);
  on_demand_.assign(n, 0);
  for (size_t g = 0; g < n; ++g) on_demand_[g] = problem.groups[g].on_demand;
  group_mutex_ = std::vector<std::mutex>(n);
  wanted_.assign(n, 0);
  dropped_upto_.assign(n, 0);
  epoch_.assign(n, 0);
  pinned_now_.assign(n, 0);
  conv_facts_ = std::vector<ConvFacts>(n);
}

bool BudgetState::learn_conv(size_t g, uint32_t max_slices, std::vector<uint64_t> work) {
  std::lock_guard<std::mutex> lock(conv_mutex_);
  ConvFacts& facts = conv_facts_[g];
  if (facts.known) return false;
  facts.known = true;
  facts.max_slices = max_slices;
  facts.work = std::move(work);
  return true;
}

bool BudgetState::conv_known(size_t g, uint32_t* max_slices) {
  std::lock_guard<std::mutex> lock(conv_mutex_);
  *max_slices = conv_facts_[g].max_slices;
  return conv_facts_[g].known;
}

void BudgetState::apply_conv_facts(planner::BudgetProblem& problem) {
  std::lock_guard<std::mutex> lock(conv_mutex_);
  for (size_t g = 0; g < conv_facts_.size(); ++g) {
    const ConvFacts& facts = conv_facts_[g];
    if (!facts.known || facts.max_slices == 0) continue;  // aten's: its temporaries are planned
    problem.groups[g].max_slices = facts.max_slices;
    problem.groups[g].work_bytes = facts.work;
  }
}

void BudgetState::size_arena(uint64_t bytes) {
  bytes = (bytes + 4095) / 4096 * 4096;
  if (bytes == arena_bytes_.load()) return;
  if (arena_) ::munmap(arena_, arena_bytes_.load());
  arena_ = nullptr;
  arena_bytes_.store(0);
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  arena_ = p;
  arena_bytes_.store(bytes);
}

void* BudgetState::work_arena(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(arena_mutex_);
  if (bytes > arena_bytes_.load()) size_arena(bytes);
  return arena_;
}

void BudgetState::install(std::shared_ptr<const Schedule> schedule) {
  std::lock_guard<std::mutex> lock(schedule_mutex_);
  schedule_ = std::move(schedule);
}

void BudgetState::step(uint32_t s) {
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
      if (on_demand_[g]) continue;  // its lookups fault in what they touch
      const uint32_t slices = schedule.plan.slices[g];
      want(g, 0, slices > 1 ? sliceable_bytes[g] / slices : file->group_bytes(g));
    }
  }
}

int BudgetState::slices(size_t g) {
  std::lock_guard<std::mutex> lock(schedule_mutex_);
  return pass_ ? static_cast<int>(pass_->plan.slices[g]) : 1;
}

void BudgetState::want(size_t g, uint64_t offset, uint64_t bytes) {
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

void BudgetState::drop_part(size_t g, uint64_t offset, uint64_t bytes) {
  if (sampling.load(std::memory_order_relaxed)) sample();
  std::lock_guard<std::mutex> lock(group_mutex_[g]);
  file->drop(file->group_offset(g) + offset, bytes);
  dropped_upto_[g] = std::max(dropped_upto_[g], offset + bytes);
}

void BudgetState::sample() {
  const uint64_t resident = file->resident_bytes() + arena_bytes_.load(std::memory_order_relaxed);
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (resident > seen && !peak.compare_exchange_weak(seen, resident)) {
  }
}

// A new schedule takes effect at a pass's start: newly pinned groups load, unpinned ones drop.
void BudgetState::start_pass() {
  std::shared_ptr<const Schedule> schedule = schedule_;
  if (pass_ && pass_->generation == schedule->generation) return;
  for (size_t g = 0; g < pinned_now_.size(); ++g) {
    const bool pin = schedule->plan.pinned[g];
    if (pin && !pinned_now_[g]) want(g, 0, file->group_bytes(g));
    if (!pin && pinned_now_[g]) release(g);
    pinned_now_[g] = pin;
  }
  pass_ = std::move(schedule);
  std::lock_guard<std::mutex> lock(arena_mutex_);
  size_arena(pass_->plan.work_bytes);
}

void BudgetState::release(size_t g) {
  if (on_demand_[g]) {
    const uint64_t seen = file->resident_bytes(file->group_offset(g), file->group_bytes(g));
    uint64_t most = touched[g].load(std::memory_order_relaxed);
    while (seen > most && !touched[g].compare_exchange_weak(most, seen)) {
    }
  }
  {
    std::lock_guard<std::mutex> lock(group_mutex_[g]);
    wanted_[g] = 0;
    dropped_upto_[g] = 0;
    ++epoch_[g];  // loads still queued for this use of g are void
    file->drop(file->group_offset(g), file->group_bytes(g));
  }
  drop_fault_around(g);
}

// A fault on the mapping also maps the pages of its aligned fault-around window (mm/memory.c,
// fault_around_bytes: 64 KiB) that are in the page cache, so loading a group maps the neighbours'
// pages at its two ends again, after their release: they stayed until the neighbour's next release
// (resnet18 at 15% with a cold page cache: 9 groups held 16-56 KiB each, 120 KiB past the budget).
// Once g is done with, no fault of it maps more: the windows at its ends are dropped in every group
// neither pinned nor asked for (on-demand groups keep what they touched: it is measured).
constexpr uint64_t kFaultAroundBytes = 64 << 10;

void BudgetState::drop_fault_around(size_t g) {
  // The windows are aligned in the address space, not in the file.
  const uint64_t base = reinterpret_cast<uintptr_t>(file->base());
  const uint64_t start = base + file->group_offset(g), end = start + file->group_bytes(g);
  const uint64_t window = start / kFaultAroundBytes * kFaultAroundBytes;
  const uint64_t low = window > base ? window - base : 0;
  const uint64_t high =
      (end + kFaultAroundBytes - 1) / kFaultAroundBytes * kFaultAroundBytes - base;
  for (size_t h = 0; h < file->groups(); ++h) {
    if (h == g || pinned_now_[h] || on_demand_[h]) continue;
    const uint64_t from = std::max(low, file->group_offset(h));
    const uint64_t to = std::min(high, file->group_offset(h) + file->group_bytes(h));
    if (from >= to) continue;
    std::lock_guard<std::mutex> lock(group_mutex_[h]);
    if (!wanted_[h]) file->drop(from, to - from);
  }
}

void BudgetState::load_loop() {
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
    // A load from an earlier use of the group (the loader ran a pass late), or of a slice already
    // computed and dropped, is not made.
    if (wanted_[load.group] && load.epoch == epoch_[load.group] &&
        load.offset + load.bytes > dropped_upto_[load.group]) {
      file->populate(file->group_offset(load.group) + load.offset, load.bytes);
    }
  }
}

}  // namespace memoplan::torch_ext::budget

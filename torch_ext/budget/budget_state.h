// A budgeted module's runtime state: its weight file, the problem learned at plan time, the
// schedule in force (swapped whole by a re-plan, taken up at a pass's start), and the loader
// thread that faults groups (or slices) in ahead of the step that reads them. Every step of a pass
// drops what the steps before were the last to read and asks the loader for what is due. No torch
// headers here.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memoplan/planner/budget.h"
#include "memoplan/torch/budget.h"
#include "weight_file.h"

namespace memoplan::torch_ext::budget {

// A budget plan laid out by step: the groups each step loads and drops.
struct Schedule {
  planner::BudgetPlan plan;
  std::vector<std::vector<uint32_t>> load_at, release_at;  // per step 0..steps
  uint64_t generation = 0;
};

std::shared_ptr<const Schedule> make_schedule(const planner::BudgetProblem& problem,
                                              planner::BudgetPlan plan, uint64_t generation);
// Streams every group at its first use, sliced as far as it may be: what runs before the
// activations are known.
planner::BudgetPlan streaming_plan(const planner::BudgetProblem& problem);

class BudgetState {
 public:
  // Set up before the state is shared (prepare()), then read-only, but for `problem`'s activation
  // and budget bytes and `last`, which plan() and set_budget() change between passes.
  std::shared_ptr<WeightFile> file;
  planner::BudgetProblem problem;
  std::vector<uint64_t> sliceable_bytes;  // per group: its sliceable weight's bytes, else 0
  std::vector<uint8_t> conv;              // per group: that weight is a convolution's
  uint64_t budget_bytes = 0;
  BudgetSummary last;

  // Per on-demand group: the most of it a pass touched (measured at its release), else 0.
  std::vector<std::atomic<uint64_t>> touched;
  std::atomic<bool> sampling{false};  // sample() at every step and slice
  std::atomic<uint64_t> peak{0};      // the most resident bytes sampled
  std::atomic<uint64_t> refused{0};   // sliced linears that ran whole

  BudgetState();  // starts the loader thread
  ~BudgetState();
  BudgetState(const BudgetState&) = delete;
  BudgetState& operator=(const BudgetState&) = delete;

  // Sizes the per-group state once `problem` has its groups.
  void init_groups(size_t n);
  // The schedule the next pass starts on.
  void install(std::shared_ptr<const Schedule> schedule);

  // Step `s` of a pass begins (0: the pass does; steps: it ends).
  void step(uint32_t s);
  // The slices group g is computed in by the pass running (1 before any).
  int slices(size_t g);
  // Asks the loader for [offset, offset + bytes) of group g.
  void want(size_t g, uint64_t offset, uint64_t bytes);
  // Drops a computed slice of group g.
  void drop_part(size_t g, uint64_t offset, uint64_t bytes);
  // Reads the mapping's resident bytes, plus the work arena's, into `peak`.
  void sample();

  // A convolution group's first call: the most slices whose parts compute aten's bytes (0: not
  // even one part, the convolution runs as aten's) and the working bytes by 2^k slices. Kept for
  // every later plan (planned with it from the next re-plan on). Returns false when already known.
  bool learn_conv(size_t g, uint32_t max_slices, std::vector<uint64_t> work);
  // Whether group g's convolution is known, and its most slices (0: aten's).
  bool conv_known(size_t g, uint32_t* max_slices);
  // Writes the convolutions' facts into `problem`'s groups.
  void apply_conv_facts(planner::BudgetProblem& problem);
  // The work arena (one pass at a time): at least `bytes`, sized at each pass's start to what the
  // plan in force needs, and grown here when a call needs more (before a plan knows its
  // convolutions). Never fails: throws std::bad_alloc.
  void* work_arena(uint64_t bytes);

 private:
  struct Load {
    size_t group;
    uint64_t offset, bytes;
    uint64_t epoch;  // the group's epoch when asked for
  };

  struct ConvFacts {
    bool known = false;
    uint32_t max_slices = 0;
    std::vector<uint64_t> work;
  };

  void start_pass();                 // under schedule_mutex_
  void size_arena(uint64_t bytes);   // under arena_mutex_
  void release(size_t g);            // after the group's last step
  void drop_fault_around(size_t g);  // the neighbours' pages g's faults mapped
  void load_loop();                  // the loader thread

  std::mutex schedule_mutex_;
  std::shared_ptr<const Schedule> schedule_;
  // Under schedule_mutex_: the schedule of the pass running, and the groups it pinned.
  std::shared_ptr<const Schedule> pass_;
  std::vector<uint8_t> pinned_now_;
  std::vector<uint8_t> on_demand_;
  std::vector<std::mutex> group_mutex_;
  // Under group_mutex_[g]: g is asked for; the end of its slices dropped this use (0: none); its
  // releases so far (a load asked for before the last release is void).
  std::vector<uint8_t> wanted_;
  std::vector<uint64_t> dropped_upto_;
  std::vector<uint64_t> epoch_;
  std::mutex conv_mutex_;
  std::vector<ConvFacts> conv_facts_;
  std::mutex arena_mutex_;
  void* arena_ = nullptr;
  std::atomic<uint64_t> arena_bytes_{0};
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Load> queue_;
  bool stop_ = false;
  std::thread loader_;  // last: started once the rest is built
};

}  // namespace memoplan::torch_ext::budget

// Planning a TorchScript module's memory: memoplan::torch_ext::plan rewrites the module's forward
// graph with memoplan::AllocateSlab / AllocateTensor / EndPass nodes, profiles a steady-state pass
// for the example inputs, plans it, and from then on every forward call with the same input key
// (shapes, dtypes, intra-op thread count, grad mode) runs its planned tensors from a per-thread
// slab. Anything unplanned or deviating goes to the default allocator, counted. Behaviour, limits
// and measurements: docs/TORCH_EXT.md. No torch headers here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/trace.h"

namespace torch::jit {
struct Module;
}
namespace c10 {
struct IValue;
}

namespace memoplan::torch_ext {

// Which kernels run a planned module (PlanOptions::kernels).
enum class Kernels {
  kStock,  // aten's ops as they are
  // aten::linear (and a relu/gelu after it), the products, attention and the convolutions on
  // memoplan's kernels and oneDNN primitives where each shape measured faster than aten's op
  // during the warm-up passes (docs/KERNELS.md)
  kTuned,
};
// How planned tensors may share bytes (PlanOptions::memory).
enum class Memory {
  kOffset,  // every tensor gets bytes of its own (the plan's floor is the offset lower bound)
  // an elementwise op's output may take the bytes of an input that dies in it, a concat's inputs
  // may lie inside its output (batch 1), convolutions and max poolings run in parts where that
  // shrinks their temporaries: the plan can go below that bound (docs/TORCH_EXT.md)
  kMin,
};
// "stock", "tuned"; "offset", "min": the names the CLI, Python and the reports use.
const char* name(Kernels kernels);
const char* name(Memory memory);
std::optional<Kernels> parse_kernels(std::string_view text);  // nullopt: not a name above
std::optional<Memory> parse_memory(std::string_view text);
// What the tuned kernels measured and chose, one line per tuned shape (docs/KERNELS.md); empty
// while libmemoplan_tuned.so is not loaded (plan() loads it when asked for kernels "tuned").
std::string kernel_report();

struct PlanOptions {
  std::string strategy = "greedy_by_size";  // any planner strategy (memoplan plan --list)
  // Passes a new input key runs unplanned before its profiled pass: TorchScript's profiling
  // executor re-optimizes the graph during the first ones.
  int warmup_passes = 3;
  // A key plan() was not called with is profiled and planned on first use (after warm-up);
  // false: such keys run unplanned.
  bool plan_new_keys = true;
  // Only the first plan() of a module decides both.
  Kernels kernels = Kernels::kStock;
  Memory memory = Memory::kOffset;
  // A memory budget for weights and activations together (0: none; memoplan/torch/budget.h,
  // docs/BUDGET.md): the weights move into a file-backed mapping in `weights_dir` (empty:
  // $MEMOPLAN_WEIGHTS_DIR, else ~/.cache/memoplan/weights) and are loaded, dropped and sliced so
  // the slab plus the resident weights stay under it. Kernels "stock" only. plan() throws
  // BudgetTooSmall, naming the smallest feasible budget, when none fits; set_budget() changes it
  // without a pass. Only the first plan() of a module decides whether it has one.
  uint64_t budget_bytes = 0;
  std::string weights_dir;
  // Kernels "tuned" only: the weights are held once. They move into a file-backed mapping in
  // `weights_dir` before the first planned pass, and once plan() has packed them their pages are
  // given back: a weight read only through its packed form leaves memory, one a path still reads
  // plain keeps one copy (faulted in from the file). The weights become read-only: changing one
  // in place afterwards faults. For callers that own the module (memoplan run, memoplan-serve).
  // Only the first plan() of a module decides.
  bool release_weights = false;
};

// How much of one planned pass runs on memoplan's kernels (kernels "tuned"): the pass's
// convolution and matrix-product FLOPs (conv1d/2d/3d and transposed, linear, matmul, mm, bmm,
// addmm, baddbmm, the transformer encoder layer), those that ran on memoplan's kernels or oneDNN
// primitives, and every op kind left on aten with the reason. Measured by plan() on one extra
// planned pass after planning (docs/TORCH_EXT.md, "Coverage").
struct Coverage {
  bool measured = false;  // false: kernels "stock", or plan() ran no pass (the key had a plan)
  double flops = 0;
  double tuned_flops = 0;
  struct Left {
    std::string op;      // e.g. aten::conv_transpose2d, or the memoplan op that chose aten
    std::string reason;  // "unknown form", "not rewritten", "chose aten at run time"
    uint64_t calls = 0;
    double flops = 0;
  };
  std::vector<Left> left;  // by FLOPs, largest first
  // Nodes of compute ops that RecordFunction does not see, so FLOPs unknown (JIT-only operators:
  // optimize_for_inference's prim::mkldnn_convolution); each is also in `left`, "unknown form".
  uint64_t unobserved_nodes = 0;
  // 1 for a pass without such ops; 0 when unobserved compute ran beside (its share unknown).
  double tuned_flops_fraction() const {
    if (unobserved_nodes > 0) return 0.0;
    return flops > 0 ? tuned_flops / flops : 1.0;
  }
};

struct PlanSummary {
  std::string key;
  uint64_t slab_bytes = 0;
  uint64_t lower_bound_bytes = 0;         // with the sharing the plan took (memory "min")
  uint64_t offset_lower_bound_bytes = 0;  // without any: today's bound
  uint64_t shared_tensors = 0;            // planned over live tensors they share bytes with
  uint64_t planned_tensors = 0;           // per pass
  uint64_t escaping_tensors = 0;          // alive at the pass end (outputs): never planned
  uint64_t visits = 0;                    // AllocateTensor nodes executed per pass
  // Bytes of the planned tensors, and of those planned over a live tensor they share bytes with
  // (memory "min": an elementwise op's output over its dying input, a concat's inputs inside it).
  uint64_t planned_bytes = 0;
  uint64_t coalesced_bytes = 0;
  std::string strategy;
  // What runs the planned forward from now on: "flat" (memoplan's flat executor, opt-in with
  // MEMOPLAN_EXECUTOR=flat: docs/TORCH_EXT.md) or "interpreter: " and why (the default, a loop).
  std::string executor;
  double planning_ms = 0;
  Coverage coverage;
  // The weights after plan(), kernels "tuned": the packed forms kept (every planned module's; those
  // its last pass did not use are dropped), and with release_weights the plain weights moved into
  // their file and of those the bytes a planned pass read (a path that reads them plain: they stay
  // resident). 0 where not so.
  uint64_t packed_weight_bytes = 0;
  uint64_t released_weight_bytes = 0;
  uint64_t released_weight_resident_bytes = 0;
  double coalesced_bytes_fraction() const {
    return planned_bytes > 0 ? static_cast<double>(coalesced_bytes) / planned_bytes : 0.0;
  }
};

// Rewrites module.forward (once; a module of an already rewritten type reuses its graph and
// plans, if it holds the same settings: below) and runs it with `inputs` until the pass for their
// key is profiled and planned. The rewrite first brings the graph to canonical forms (a traced
// aten::_convolution as aten::conv2d, ...) and takes the module's non-tensor settings (bools,
// ints, floats, strings the graph reads and never sets; not `training`) as constants
// (docs/TORCH_EXT.md, "Graph forms"). Call it
// before serving: replacing forward while another thread runs it is not safe. Throws
// std::runtime_error when the module has no forward graph or planning fails.
PlanSummary plan(torch::jit::Module& module, const std::vector<c10::IValue>& inputs,
                 const PlanOptions& options = {});

// Forgets every plan of `module` (the module or any module of its rewritten type) and what its
// shape families learned: each input key is warmed up, profiled and planned again on its next
// passes; each thread gives back its slabs of the module (once their blocks are freed) at its
// next pass of it. For traffic that changed for good, or to give slabs of shapes no longer seen
// back. Does nothing for a module plan() never rewrote. Python:
// torch.ops.memoplan.forget_plans(module).
void forget_plans(const torch::jit::Module& module);

// The module will not run again (it is about to be dropped): its plans, what its shape families
// learned, its tuned kernels' packed weights and measurements, its budget's state and its coverage
// go now; each thread's slabs of it at the thread's next pass of it or its exit; its weights' file
// mapping once the weights themselves die. For a server that unloads models: without it each load
// leaves that state behind. Acts on every module of its rewritten type (as forget_plans); one that
// runs after all is warmed up, profiled and planned anew, its packings made again. Does nothing
// for a module plan() never rewrote. Python: torch.ops.memoplan.forget_module(module).
void forget_module(const torch::jit::Module& module);

// Gives back to the system what the allocator underneath malloc keeps free (glibc, tcmalloc,
// mimalloc or jemalloc, whichever serves it): plan() calls it once a plan is made, memoplan-serve
// once an unloaded model is gone.
void release_free_memory();

// The calling thread's OpenMP worker threads exit (its next parallel region makes them again).
// plan() calls it last: a process that plans on one thread and serves on others would otherwise
// keep the planning thread's workers, and libgomp, managing more threads than there are CPUs,
// puts every worker to sleep at once after each parallel region (on two CPUs a serving thread's
// two intra-op threads then ran slower than one). Call it after other OpenMP work on a thread that
// will not run inference (a loader thread). Does nothing inside a parallel region.
void release_openmp_threads();

// What one module holds in memory now, planned or not: its plain weights (the tensors among its
// attributes, every submodule's, and its forward graph's tensor constants, each storage once) and
// of them the bytes resident (/proc/self/pagemap: weights moved into a file mapping count only the
// pages paged in), the packed forms the tuned kernels keep for it, and its slabs. Python:
// torch.ops.memoplan.module_memory(module) (a dict of these names).
struct ModuleMemory {
  uint64_t weight_bytes = 0;
  uint64_t weight_resident_bytes = 0;
  uint64_t packed_weight_bytes = 0;
  uint64_t slab_bytes = 0;       // the arenas threads hold for it now
  uint64_t plan_slab_bytes = 0;  // the largest slab among its plans: one more thread's
  uint64_t resident_bytes() const {
    return weight_resident_bytes + packed_weight_bytes + slab_bytes;
  }
};
ModuleMemory module_memory(const torch::jit::Module& module);

// Process-wide counters of planned modules, all threads.
struct PlanStats {
  uint64_t passes = 0;                // AllocateSlab executions
  uint64_t planned_passes = 0;        // of which ran on a plan
  uint64_t profiled_passes = 0;       // of which were profiled
  uint64_t unplanned_passes = 0;      // warm-up, no plan for the key, or plan_new_keys off
  uint64_t plans = 0;                 // plans made
  uint64_t planned_hits = 0;          // tensor requests served from a slab
  uint64_t fallback_not_planned = 0;  // a request the plan had no slot for at that node
  uint64_t fallback_escaping = 0;     // its slot escaped the profiled pass
  uint64_t fallback_overlap = 0;      // its slot's memory was still in use (the guard said no)
  uint64_t slabs = 0;                 // slabs created (one per thread and plan)
  uint64_t slab_bytes = 0;            // their bytes
  // Non-empty tensor requests made during passes (unplanned ones included) that the slab did not
  // serve: they went to the allocator installed before (c10's, i.e. the system malloc).
  uint64_t tensor_mallocs = 0;
  // Tensors of warm-up passes (before a key's plan) given exact blocks, whose pages go back at
  // their free: the warm-up leaves no allocator-retained memory beside the slab.
  uint64_t warmup_exact_blocks = 0;
  // Shape families (docs/TORCH_EXT.md, "Inputs whose shapes vary"): plans made from a family's
  // formulas, without warm-up or profiling (part of `plans`), and passes that missed such a plan
  // (the plan dropped, its key profiled like any other).
  uint64_t family_plans = 0;
  uint64_t family_mispredictions = 0;
  // The largest slab a thread has held: one plan's arena, or the arena a thread shares among the
  // plans of one shape family (as large as the largest of them). A maximum: `after - before`
  // keeps after's.
  uint64_t slab_bytes_max = 0;
};
PlanStats plan_stats();

// The calling thread's last finished pass of a planned module: whether it ran on a plan (and
// every request the plan knew came from the slab: no fallback other than escaping outputs), or
// was profiled.
struct PassOutcome {
  bool replayed = false;
  bool profiled = false;
  uint64_t planned_hits = 0;
  uint64_t fallbacks = 0;  // not_planned, overlap, guard full, alignment (escaping outputs not)
  // The plan it ran on (replayed): predicted from the shape family's formulas or profiled, its
  // slab and the offset lower bound of its pass.
  bool predicted = false;
  uint64_t slab_bytes = 0;
  uint64_t lower_bound_bytes = 0;
  bool fully_planned() const { return replayed && fallbacks == 0; }
};
PassOutcome last_pass();
// Field by field: the counts between two snapshots (slabs and slab_bytes too).
PlanStats operator-(const PlanStats& after, const PlanStats& before);
std::string to_string(const PlanStats& stats);

// The profiled pass (one trace row per recorded allocation, in allocation order) and the plan the
// planner made for it, e.g. for memoplan::render_heapmap_svg (memoplan/heapmap.h).
struct PlanDetail {
  Trace trace;
  Plan plan;
};
// The detail of `module`'s plan for `key` (PlanSummary::key); nullopt when the module was never
// planned, has no plan for that key, or planned it from a shape family's formulas (no profiled
// pass: only profiled plans keep their trace).
std::optional<PlanDetail> plan_detail(const torch::jit::Module& module, const std::string& key);

}  // namespace memoplan::torch_ext

// torch_ext/planning/: the planning runtime of the LibTorch extension, what the rest of the
// extension may use of it. The folder records a module's pass (the tagged c10 allocator, the aten
// shadow stack, ProfileSession), provides the memoplan::AllocateSlab / AllocateTensor / EndPass
// operators (pass_operators.cc) that plan/graph_pass.cc puts into a module's forward, and replays
// the plan through the shared runtime (src/replay: one arena per thread and plan). It knows
// nothing of the rewrites above it (plan/, memory_min/, budget/, tuned/); the tuned kernels hook in
// through register_kernels below (torch_ext/tuned/ registers Kernels::kTuned). No torch headers.
//
// When its files run: at plan time profiler.cc, tagged_allocator.cc, record_table.cc,
// shadow_stack.cc (the profiled pass) and compiled_plan.cc (planning); on every pass
// pass_operators.cc and pass_runtime.cc (the thread's lifecycle); on every tensor request
// replay_allocator.cc and replay_state.cc (the fast path: replay::serve_slot).
#pragma once

#include <cstdint>
#include <string>

#include "memoplan/torch/plan.h"  // Kernels

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// A graph rewrite that replaces ops with faster kernels, run on the inlined forward before the
// allocation marks go in (a replacement's outputs are planned like any other tensor); what it
// keeps for the graph (packed weights, measurements) belongs to `module`. Returns how many ops it
// replaced.
using KernelRewrite = int (*)(torch::jit::Graph& graph, int64_t module);
// What a kernel set provides: its rewrite and its report (kernel_report(), memoplan/torch/plan.h).
struct KernelSet {
  KernelRewrite rewrite = nullptr;
  std::string (*report)() = nullptr;
  // A module's packed weights' census (tuned/weight_cache.h): begin before a pass, end after it
  // keeps only the forms that pass used and returns their bytes; packed_bytes counts what one
  // module keeps (-1: every module); forget drops everything kept for the module.
  void (*begin_census)(int64_t module) = nullptr;
  uint64_t (*end_census)(int64_t module) = nullptr;
  uint64_t (*packed_bytes)(int64_t module) = nullptr;
  void (*forget)(int64_t module) = nullptr;
};
// Makes `*set` what PlanOptions::kernels == `kernels` selects (Kernels::kStock selects none).
// Called at load time by the library that provides the kernels (libmemoplan_tuned.so, never
// unloaded), with a set that lives as long as it.
void register_kernels(Kernels kernels, const KernelSet* set);
// The rewrite registered for `kernels`; nullptr when none is (and for Kernels::kStock).
KernelRewrite registered_kernels(Kernels kernels);
// The registered tuned set's census, byte count and forgetting for one module (0 and no-ops where
// none is loaded); packed_weight_bytes(-1) counts every module's.
void begin_packed_census(int64_t module);
uint64_t end_packed_census(int64_t module);
uint64_t packed_weight_bytes(int64_t module);
void forget_packed_weights(int64_t module);

// release_free_memory(): memoplan/torch/plan.h.

namespace runtime_pass {

// The key of the calling thread's latest pass (empty before its first): the tuned ops keep their
// layout plans per graph and key.
const std::string& current_key();
// Changes whenever the calling thread's current_key() does (and only then): what a per-thread copy
// of something kept per key checks on every call instead of comparing the key.
uint64_t current_key_serial();

// While one is alive, the calling thread's allocations bypass its slab: for memory that outlives
// the pass it is made in (weights an op re-lays-out when they changed), which would otherwise take
// a slot another tensor of the plan needs.
class OffPlan {
 public:
  OffPlan();
  ~OffPlan();
  OffPlan(const OffPlan&) = delete;
  OffPlan& operator=(const OffPlan&) = delete;

 private:
  int saved_mode_;
};

// While one is alive, the calling thread's allocations are neither served by its plan nor recorded
// by a profiled pass: for work an op does once, beside the pass (a check of its own result), which
// later passes will not repeat and the plan must therefore not count.
class Unrecorded {
 public:
  Unrecorded();
  ~Unrecorded();
  Unrecorded(const Unrecorded&) = delete;
  Unrecorded& operator=(const Unrecorded&) = delete;

 private:
  OffPlan off_plan_;
  bool saved_;
};

// While one is alive (with an Unrecorded), the calling thread's allocations all go to the allocator
// behind memoplan's, a warm-up pass's large blocks too (they get exact blocks of memoplan's own
// otherwise): c10's default allocator reports each to a memory profiler
// (memory_min/allocation_peak.h).
class ToAllocatorBehind {
 public:
  ToAllocatorBehind();
  ~ToAllocatorBehind();
  ToAllocatorBehind(const ToAllocatorBehind&) = delete;
  ToAllocatorBehind& operator=(const ToAllocatorBehind&) = delete;

 private:
  bool saved_warming_;
};

// The bytes of `module`'s weights when plan() rewrote it (its parameters, buffers and tensor
// constants); 0 for -1 (no module).
uint64_t module_weight_bytes(int64_t module);
// The options `module` was planned with; null for -1 (no module).
const PlanOptions* module_options(int64_t module);

}  // namespace runtime_pass
}  // namespace memoplan::torch_ext

// The guard of a graph whose `training` flags were folded into constants (attribute_constants.h).
// A scripted module reads `self.training` in every batch norm and dropout; left as reads, each
// keeps its training branches in every copy of the graph LibTorch's executor makes (scripted
// mobilenet_v2: some 6 MiB of a planned process). Folded, the call must still run the training
// branches when a module's flag changes after plan(): the planned forward becomes
//
//   %hold = memoplan::SettingsHold(id, self)        -- every folded flag as folded?
//   %out = prim::If(%hold)
//     block0: the planned graph                      -- AllocateSlab ... EndPass
//     block1: memoplan::RunUnfolded(id, self, x...)  -- the forward as it was before plan()
//
// RunUnfolded is an operator, not a method call, so that no executor inlines the unfolded forward
// into the planned graph's copies. Its function is built from the forward's graph before
// inlining (a few calls) and compiles only when a call first takes it. The check reads one slot
// per level of each flag's path (resolved once from the module's types; by name where a level
// is an interface): no name lookups on the fast path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attribute_constants.h"

namespace torch::jit {
struct Block;
struct Graph;
struct Module;
}  // namespace torch::jit

namespace memoplan::torch_ext {

// Wraps `planned` (module `id`'s forward, already rewritten) in the guard of `folded`'s guarded
// flags, the branch that fails running `unfolded` (the forward's graph as before plan()). Does
// nothing when no flag was guarded; returns whether it wrapped.
bool guard_folded_settings(torch::jit::Graph& planned, int64_t id, const torch::jit::Module& module,
                           std::shared_ptr<torch::jit::Graph> unfolded,
                           const std::vector<FoldedAttribute>& folded);

// The planned block of a guarded graph (the If's first block), else the graph's own block.
const torch::jit::Block* planned_block(const torch::jit::Graph& graph);

// Empty when `module` (of module `id`'s type) holds every guarded flag as folded (or `id` has no
// guard); else the first flag that differs ("features.1.training"), for plan()'s error: a pass in
// which the guard fails runs unplanned, so a plan cannot be made on it.
std::string differing_flag(int64_t id, const torch::jit::Module& module);

}  // namespace memoplan::torch_ext

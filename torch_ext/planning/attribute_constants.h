// A module's settings as constants (what torch.jit.freeze does, for these only): the non-tensor
// attributes a scripted forward reads and never sets -- bools, ints, floats and strings such as
// nn.ReLU6's `inplace` or InvertedResidual's `use_res_connect` -- become constants, so the
// branches on them fold away and a scripted graph holds the program its traced form holds.
// `training` folds too, but guarded: settings_guard.h sends a call whose modules' flags differ
// from the folded ones (a module switched to train() after plan()) to the unplanned forward. Not
// tensors, lists or objects, and nothing in a graph that sets any attribute. plan() runs it
// before the graph's cleanup (graph_pass.cc); a second module of the rewritten type reuses the
// graph only if it holds the same values (the guarded ones excepted).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch::jit {
struct Graph;
struct Module;
}  // namespace torch::jit

namespace memoplan::torch_ext {

struct FoldedAttribute {
  std::vector<std::string>
      path;              // attribute names from the module down: {"features", "1", "inplace"}
  std::string value;     // as the fold read it, in a form compared exactly
  bool guarded = false;  // a `training` flag: checked at every call, not at plan()
};

std::vector<FoldedAttribute> fold_attributes(const torch::jit::Module& module,
                                             torch::jit::Graph& graph);

// Empty when `module` holds the folded values (the guarded ones aside); else the first attribute
// that differs, for a message.
std::string first_difference(const torch::jit::Module& module,
                             const std::vector<FoldedAttribute>& folded);

// What module `id`'s graph took (plan()'s rewrite), and the check of a second module of its type:
// throws std::runtime_error naming the first attribute whose value differs.
void keep_folded(int64_t id, std::vector<FoldedAttribute> folded);
void refuse_other_settings(int64_t id, const torch::jit::Module& module);
void forget_folded(int64_t id);  // forget_module()

}  // namespace memoplan::torch_ext

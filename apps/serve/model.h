// The served model, planned: a TorchScript module (memoplan::torch_ext::plan) or an AOTInductor
// package (.pt2 on LibTorch >= 2.6: its run() as a torch_ext::PlannedCall). Loading, its
// signature as the metadata describes it, and forward calls on host tensors. model.cc is the server's only
// translation unit with torch headers (they take 5-30 s each to compile); this header has none.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "input_spec.h"
#include "tensor.h"

namespace memoplan::serve {

struct ModelOptions {
  std::string path;
  std::string name;
  // One per forward tensor argument. Empty: the file's extra file "input_shape" (one FP32 input)
  // if it has one; else no default, and the first request's inputs are planned.
  std::vector<InputDefault> inputs;
  std::string strategy = "greedy_by_size";
  // false (--no-plan): serve with LibTorch's own allocator, for comparing against the plan.
  bool plan = true;
  // PlanOptions::kernels and ::memory by name ("stock"/"tuned", "offset"/"min"); with "tuned" the
  // server owns the module, so its weights are held once (PlanOptions::release_weights). "auto"
  // (the server's default): "tuned", "stock" under a budget or where the tuned plan fails.
  std::string kernels = "stock";
  std::string memory = "offset";
  // PlanOptions::budget_bytes as text (torch_ext::parse_budget: bytes, or a share of the weights
  // plus the slab); empty: none.
  std::string budget;
  // The inference threads that call infer() (an AOTInductor package runs this many calls at once).
  int workers = 1;
};

class Model {
 public:
  // Loads the file. Throws std::runtime_error when it cannot be read or its forward takes
  // arguments the server cannot feed (non-tensor arguments without a default).
  explicit Model(const ModelOptions& options);
  // Once no worker runs it: what memoplan keeps for the module goes with it (forget_module).
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Plans the default input if one is known and learns the outputs from its forward; call once,
  // before any worker runs. Returns a line for the log. Throws std::runtime_error.
  std::string prepare();

  // Once on each worker thread before its first infer(): one intra-op thread (the plans are made
  // for it; T workers use T cores).
  static void init_worker_thread();

  // Forward on `inputs`, ordered and checked as spec().inputs (match_inputs); the outputs in the
  // model's order, named as spec().outputs. Throws HttpError 400 when forward throws (the inputs
  // are all that varies) and 500 when it returns something other than tensors.
  std::vector<HostTensor> infer(const std::vector<HostTensor>& inputs);

  ModelSpec spec() const;  // outputs: empty until a forward has run
  ModelMemory memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memoplan::serve

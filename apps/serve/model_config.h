// A served model's settings and where a model repository keeps it. In a repository
// (--model-repository DIR) each model is a directory DIR/NAME holding its TorchScript file as
// NAME/1/model.pt (Triton's layout) or NAME/model.pt, and optionally NAME/config.json; a file
// DIR/NAME.pt is a model with the defaults. config.json (every key optional; the command line's
// values are the defaults):
//
//   {"workers": 2, "queue": 32, "strategy": "greedy_by_size", "plan": true,
//    "kernels": "tuned", "memory": "min", "memory_limit": 268435456, "max_batch_size": 8, "preferred_batch_size": [4, 8], "max_queue_delay_us": 500,
//    "inputs": [{"name": "x", "dims": [1, 3, 224, 224], "datatype": "FP32",
//                "max_dims": [16, 3, 224, 224]}]}
//
// `inputs` lists forward's tensor arguments in order: `dims` is the default input planned before
// the model reports ready (as --input), `max_dims` the largest request taken (larger ones are
// answered 400; -1 or absent: any). `kernels`, `memory`: as --kernels and --memory.
// `memory_limit`: bytes the model may hold (weights plain and packed, a slab per worker); a load
// that would hold more is refused. Unknown keys and ill-typed values are errors, never ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batcher.h"
#include "input_spec.h"

namespace memoplan::serve {

struct ModelConfig {
  std::string name;
  std::string path;  // the TorchScript file
  int workers = 1;
  size_t queue = 32;
  std::string strategy;
  bool plan = true;
  // "auto" (tuned; stock under a budget or where the tuned plan fails), or
  // memoplan::torch_ext::name(Kernels): "stock", "tuned".
  std::string kernels = "auto";
  std::string memory = "offset";  // memoplan::torch_ext::name(Memory)
  uint64_t memory_limit = 0;      // bytes; 0: none
  // A memory budget for weights + activations (memoplan::torch_ext::parse_budget's text: "64MiB",
  // "25%"); empty: none. Needs kernels "stock".
  std::string budget;
  std::vector<InputDefault> inputs;            // default inputs, forward's order
  std::vector<std::vector<int64_t>> max_dims;  // per input; empty: no limit
  BatchingOptions batching;
};

// Throws std::invalid_argument when `config` has a budget and kernels other than "stock".
void check_budget(const ModelConfig& config);
// Applies config.json's text to `config` (defaults already in it). Throws std::invalid_argument
// naming the key and what is wrong.
void apply_config_json(const std::string& text, ModelConfig& config);

// The models in a repository directory: name and file, sorted by name, each with `defaults`
// and its config.json applied. A model whose directory has no model file, or whose config.json
// is bad, is listed with `error` set (it cannot load; the repository index says why).
struct RepositoryEntry {
  ModelConfig config;
  std::string error;
};
std::vector<RepositoryEntry> scan_repository(const std::string& dir, const ModelConfig& defaults);

}  // namespace memoplan::serve

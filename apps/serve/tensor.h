// The server's torch-free view of tensors: what the HTTP side decodes from a request, what the
// model's translation unit turns into at::Tensors and back, and the model's signature as the
// metadata endpoint describes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datatype.h"

namespace memoplan::serve {

// A dense row-major tensor in host byte order (little-endian, as the binary extension sends it).
struct HostTensor {
  std::string name;
  DataType datatype = DataType::kFp32;
  std::vector<int64_t> shape;
  std::string bytes;  // element_size(datatype) x product(shape) bytes
};

// One input or output as the model metadata lists it; -1 marks a dimension any size may take.
struct TensorSpec {
  std::string name;
  DataType datatype = DataType::kFp32;
  std::vector<int64_t> shape;
  // No default input: the request's datatype and shape are not checked (forward refuses what it
  // cannot take). The metadata shows FP32 [-1] until a request ran, then its datatype and rank
  // (every dimension -1).
  bool unchecked = false;
};

// What a model runs on, known once planned: "planned" or "unplanned" (--no-plan; empty before),
// its kernels and memory options, the share of its convolution and product FLOPs on memoplan's
// kernels or oneDNN's (tuned kernels only; -1: not measured), its budget, and why the default's
// tuned kernels gave way to stock (empty: they did not).
struct RunsOn {
  std::string plan, kernels, memory;
  double tuned_flops_fraction = -1;
  uint64_t budget_bytes = 0;  // weights + activations; 0: none
  std::string kernels_fallback;
};

struct ModelSpec {
  std::string name;
  std::string platform = "pytorch_libtorch";  // Triton's name for TorchScript models
  std::string version = "1";                  // the only one; URLs may name it
  std::vector<TensorSpec> inputs;             // forward's tensor arguments, in order
  // Known once a forward has run (the default input's planning pass, else the first request).
  std::vector<TensorSpec> outputs;
  RunsOn runs_on;
};

// What a model holds now (memoplan::torch_ext::module_memory): its plain weights resident, the
// packed forms the tuned kernels keep, the slabs its workers hold, and one worker's slab (the
// largest plan's).
struct ModelMemory {
  uint64_t weights_plain = 0, weights_packed = 0, slabs = 0, slab_per_worker = 0;
  // What memory limits charge the model: its weights and a slab per worker (a worker that has not
  // served yet takes its slab at its first request).
  uint64_t charged(int workers) const {
    const uint64_t all_slabs = static_cast<uint64_t>(workers) * slab_per_worker;
    return weights_plain + weights_packed + (slabs > all_slabs ? slabs : all_slabs);
  }
};

int64_t element_count(const std::vector<int64_t>& shape);
std::string shape_text(const std::vector<int64_t>& shape);  // "[1,3,224,224]"

}  // namespace memoplan::serve

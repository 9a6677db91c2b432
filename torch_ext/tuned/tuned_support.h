// What the tuned ops share: packed weights per replaced op, the measured GEMM configuration per
// shape, intra-op parallelism, the choice override and the counters (tuned_ops.cc), and the one way
// they time their candidates (timing.cc; each keeps what it measured in a ChoiceCache,
// planning/choice_cache.h). ATen types; included by the tuned ops' translation units only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "memoplan/kernels/gemm.h"
#include "tuned_ops.h"
#include "weight_cache.h"  // new_site

namespace memoplan::onednn {
class Matmul;
}

namespace memoplan::torch_ext::tuned {

// A weight packed in the micro-kernel's panels (kept per site and panel width: weight_cache.h).
struct PackedWeight {
  kernels::PackedB panels;
};

// A weight packed in the layout a oneDNN matmul reads (`packer` packed it; any matmul whose
// same_packing agrees reads it; kept per site: weight_cache.h).
struct OneDnnWeight {
  std::shared_ptr<const onednn::Matmul> packer;
  at::Tensor bytes;
};

// The packing of `weight` (N x K, as aten::linear takes it) for panels of width nr at `site`;
// repacked when the tensor's storage or version changed since (weight_cache.h's rule). `version` >=
// 0 stands for the version counter: for memoplan's own immutable weights (a folded convolution's),
// which carry a generation number instead and may be inference tensors.
std::shared_ptr<const PackedWeight> packed_weight(int64_t site, const at::Tensor& weight, int nr,
                                                  int64_t version = -1);

// The packing of `weight` (N x K) for `matmul` at `site`, as packed_weight keeps its own.
std::shared_ptr<const OneDnnWeight> onednn_weight(
    int64_t site, const at::Tensor& weight, const std::shared_ptr<const onednn::Matmul>& matmul,
    int64_t version = -1);
// Drops every packing kept at `site` (a shape that measured aten's op faster packs nothing).
void forget_packings(int64_t site);

// out (M x N, row stride ldc) = x2d W^T + bias (+ what out holds, with accumulate), then the
// activation: x2d (M x K, column stride 1), W (N x K) packed at `site`. On memoplan's GEMM or on
// oneDNN's matmul, whichever measured faster for this shape and epilogue (on its first use, on
// random data of the shape: tuned/projection.cc); bias may be null.
void project(const at::Tensor& x2d, const at::Tensor& w, const float* bias, int64_t site,
             float* out, int64_t ldc, kernels::Activation activation, bool accumulate,
             int64_t version = -1);

// Self-attention's middle: for each (batch, head) on the intra-op threads, softmax(q k^T / sqrt(d))
// v into `context` ([batch * tokens, e], contiguous), q, k and v read in place from `qkv`
// ([batch * tokens, 3e]: head h's columns h*d, e + h*d, 2e + h*d). tuned_encoder.cc; the encoder
// layer's and memoplan::attention's.
void attend(const at::Tensor& qkv, int64_t batch, int64_t tokens, int64_t e, int64_t heads,
            at::Tensor& context);

// The fastest GEMM configuration measured for this shape (measured on first use, then cached).
kernels::GemmConfig best_config(int64_t m, int64_t k, int64_t n, kernels::Activation activation,
                                bool bias, bool prepacked);

// at::parallel_for over the intra-op threads; empty (serial) with one.
kernels::ParallelFor intra_op_parallel();

// Times memoplan's and aten's way of one op: `rounds` rounds, each an untimed then a timed call of
// one side, then of the other (interleaved so that both see the same machine; the untimed call
// first so that neither is timed while the other's threads still spin: aten's OpenBLAS workers
// against the OpenMP ones of memoplan's splits made aten's encoder layer measure 2x its cost at
// two threads); the fastest of each in milliseconds (other processes only ever add time, so the
// minimum is the op's own cost). `cold`, where given, runs between each untimed call and the
// timed one and takes what the op reads from memory in a pass out of the caches (its weights:
// flush_weight): what a pass of a model whose weights exceed the last-level cache shows each layer
// (measured warm, aten's BERT-base encoder layer tied memoplan's at one thread while in the pass it
// took 8-10% longer; it reads its transposed weights as they stream in).
struct Timing {
  double memoplan_ms, aten_ms;
};
Timing time_both(const std::function<void()>& memoplan, const std::function<void()>& aten,
                 int rounds, const std::function<void()>& cold = {});

// memoplan's way of an op against aten's, as time_both measured them: the faster serves the key
// from then on (a ChoiceCache's choice).
struct Measured {
  bool use_memoplan = false;
  double memoplan_ms = 0, aten_ms = 0;
};
Measured measure_both(const std::function<void()>& memoplan, const std::function<void()>& aten,
                      int rounds, const std::function<void()>& cold = {});
// Takes the bytes `t` reads out of the CPU caches (cold_caches.h).
void flush_tensor(const at::Tensor& t);
// Takes the weight of `site` out of the CPU caches: `plain` (aten's side reads it) and every form
// kept at the site (memoplan's side reads those).
void flush_weight(int64_t site, const at::Tensor& plain);

// Several candidates for one op, interleaved: each called once untimed, then `rounds` rounds of one
// timed call of each; the fastest of each in milliseconds, in the order given.
std::vector<double> fastest_each(const std::vector<std::function<void()>>& calls, int rounds);

// One call untimed (packing, caches, lazy initialization), then the fastest of `rounds` timed
// calls, in milliseconds.
double fastest_ms(const std::function<void()>& call, int rounds);

KernelChoice choice();   // kernel_options().choice, one atomic load (kernel_options.cc)
void count(bool tuned);  // one call run by memoplan's kernels (true) or by aten (false)
void count_in_place();   // one convolution that wrote over its dying residual
// One convolution run by a primitive in the blocked layout; `resolved`: it ran what its site
// resolved before (no cache looked up).
void count_convolution(bool resolved);

// aten::linear(x, w, b) then the activation, on memoplan's GEMM where this shape measured faster
// (w packed at `site`), else on aten.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                  int64_t site, kernels::Activation activation);

// A weight memoplan may pack: a float CPU matrix, and no autograd needed for this call. An
// inference tensor (a module loaded in inference mode) has no version counter: its packing is
// kept while its storage is (Sources), as a convolution's is: after a change in place,
// forget_module() repacks.
bool packable(const at::Tensor& weight);

}  // namespace memoplan::torch_ext::tuned

// memoplan's tuned kernels inside a TorchScript graph: the graph pass that replaces hot ops with
// memoplan::linear (aten::linear, with a following relu or gelu fused), and the counters of
// what ran. No torch headers.
#pragma once

#include <cstdint>
#include <string>

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// Replaces every aten::linear of `graph` (inlined) whose weight is a float matrix with
// memoplan::linear; a relu or gelu (approximate 'none') that is the linear's only user is fused
// into it. Returns how many linears were replaced.
int replace_hot_ops(torch::jit::Graph& graph);
// The part for aten::_transformer_encoder_layer_fwd (tuned_encoder.cc): memoplan::encoder_layer,
// the same layer on memoplan's GEMM (projections, attention products, feed-forward) with aten's
// layer norm and softmax.
int replace_encoder_layers(torch::jit::Graph& graph);
std::string encoder_report();  // one line per measured layer shape
// The part for aten::addmm, aten::matmul and aten::bmm (tuned_matmul.cc): a product with a weight
// (a matrix that keeps its storage and version) runs as memoplan::linear on the packed weight;
// a product of two activations (attention scores) on memoplan's GEMM with B packed per call.
int replace_matmul_ops(torch::jit::Graph& graph);
std::string matmul_report();
// The part for aten::conv2d (layout_pass.cc, tuned_conv.cc, layout_plan.h): every convolution
// becomes memoplan::conv2d, measured in both activation layouts (NCHW, NHWC) and, when pointwise,
// on memoplan's GEMM; FluidML's layout plan then picks each activation's layout.
int replace_convolutions(torch::jit::Graph& graph);

struct KernelStats {
  uint64_t tuned_calls = 0;   // memoplan::linear calls run by memoplan's GEMM
  uint64_t stock_calls = 0;   // calls where aten's op was measured faster, or could not be replaced
  uint64_t shapes_tuned = 0;  // distinct (M, K, N, activation, bias, threads) measured
  uint64_t weights_packed = 0;
};
KernelStats kernel_stats();

// How a shape picks between memoplan's GEMM and aten's op. kMeasure (the default) times both;
// the other two skip the timing: for tests and for benchmarks that must run one side only.
enum class KernelChoice { kMeasure, kAlwaysMemoplan, kAlwaysAten };
void set_kernel_choice(KernelChoice choice);
// One line per tuned shape: its measurements (stock vs best memoplan configuration).
std::string kernel_report();

}  // namespace memoplan::torch_ext

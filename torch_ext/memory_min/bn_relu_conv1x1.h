// Memory "min"'s dense-layer bottleneck (bn_relu_conv1x1.cc): batch norm in inference, ReLU and a
// 1x1 convolution on an input that stays alive after them (DenseNet: the concatenation of every
// earlier layer's features, whose parts the next layers read again). aten makes the normalized
// activation whole -- as large as that input -- beside the input and the convolution's output:
// densenet121's peak. memoplan::bn_relu_conv1x1 makes it a band of rows at a time instead.
//
// At one intra-op thread aten runs a batch-1..15 1x1 convolution as one OpenBLAS GEMM per image
// (rows = output pixels), and OpenBLAS's result for a row depends on the row blocks its level-3
// driver cuts the call into (the first block of a call takes another path than the later ones): a
// band computed as a GEMM of its own differs from the whole. Each band after the first is
// therefore a GEMM whose leading rows are zeros laid out so that the driver cuts the call as it
// cut the whole one (the band's rows fall on later blocks, each as large as the whole's); the
// zeros' results land on rows computed afterwards. The driver's blocking (its P and its row
// rounding) is learned once per process from the library itself, and each shape and thread count
// is checked once on random input against aten's three ops, byte for byte, beside the pass;
// anything else runs as aten's ops (the convolution through memoplan::conv2d_sliced). No torch
// headers.
#pragma once

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// Replaces aten::batch_norm -> aten::relu(_) -> aten::conv2d chains whose batch norm and ReLU
// outputs have no other use and whose input is still read after them (another use later, or a
// concatenation of tensors read later) by memoplan::bn_relu_conv1x1; by
// memoplan::cat_bn_relu_conv1x1 (the concatenation's inputs read in place: it is never made in
// bands) when the input is an aten::cat only the batch norm reads (its aten::dim and aten::size
// checks rewired to the list) and nothing uses the list before the convolution. Returns how many.
int fuse_bn_relu_conv1x1(torch::jit::Graph& graph);

}  // namespace memoplan::torch_ext

// oneDNN primitives on the blocked channel layout (nChw16c with AVX-512, nChw8c with AVX2: C split
// into blocks of B channels, each block's B values of one pixel adjacent) and on the plain ones
// (NCHW, NHWC): the convolution with its epilogue (bias, then a list of post-ops: activations and
// one residual addition), pooling, elementwise activations, binary add/mul with per-channel
// broadcasting, and conversions between the three. Each tensor's layout is a Format. A blocked
// activation of N x C x H x W takes N * ceil(C / B) * B * H * W floats; the padding channels are
// zero (every primitive here writes them so, and the convolutions' weights are zero there too).
// Every primitive takes a caller-given scratchpad (the caller plans it like any other tensor) and
// is cached per shape; one instance serves concurrent callers. Torch-free: ATen types stay in
// blocked_ops.cc. Compiles against oneDNN 2.x (Debian 12) and 3.x (Debian 13).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace memoplan::onednn {

// The channel block of this CPU's blocked layout: 16 with AVX-512, 8 with AVX2, 0 where oneDNN's
// blocked kernels would not beat aten (no AVX2): the graph pass then leaves convolutions alone.
// MEMOPLAN_BLOCKED_LAYOUT=0 forces 0 (the NCHW/NHWC plan alone), =8 or =16 a block size.
// Where oneDNN fails self_check() on this CPU, 0 too, said once on stderr.
int block_size();
int64_t padded_channels(int64_t channels);  // rounded up to the block

// Elementwise functions, in oneDNN's terms (post-ops and standalone): f(x; alpha, beta).
enum class Eltwise : int {
  kRelu = 1,         // max(x, 0) + alpha * min(x, 0) (leaky with alpha != 0)
  kClip = 2,         // min(max(x, alpha), beta): hardtanh, ReLU6
  kHardswish = 3,    // x * min(max(x + 3, 0), 6) / 6
  kHardsigmoid = 4,  // min(max(x / 6 + 1/2, 0), 1): two oneDNN steps (linear, then clip)
  kSigmoid = 5,
  kSilu = 6,  // x * sigmoid(x)
  kGelu = 7,  // the erf form
  kTanh = 8,
};
constexpr int kResidualAdd = 100;  // a post-op kind: + the residual operand, same shape
// A post-op kind: + what the output held before the call (the residual, written over in place:
// oneDNN's sum). Not idempotent: a call adds once more.
constexpr int kResidualSum = 101;

struct PostOp {
  int kind = 0;  // an Eltwise, kResidualAdd or kResidualSum
  float alpha = 0.f, beta = 0.f;
};

// A 4-d activation's layout; numbered as the layout plan numbers its candidates (layout_plan.h).
enum class Format : int { kNchw = 0, kNhwc = 1, kBlocked = 2 };
constexpr int kFormats = 3;

// The weight bytes one slice of a sliced packing reads (Conv::pack_weights).
constexpr size_t kPackingSliceBytes = size_t{1} << 20;

// A convolution's output side along one dimension (aten's and oneDNN's rule, symmetric padding);
// <= 0 when the kernel does not fit.
inline int64_t conv_output_side(int64_t in, int64_t padding, int64_t dilation, int64_t kernel,
                                int64_t stride) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

struct ConvSpec {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t out_channels = 0, kh = 0, kw = 0, groups = 1;
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  Format input = Format::kBlocked, output = Format::kBlocked;  // a residual is in `output`'s
  std::vector<PostOp> post;
  // oneDNN's Winograd algorithm (its F(2, 3) kernels for small batches) in place of its direct
  // one: conv() throws where it has none for the shape, layouts and epilogue.
  bool winograd = false;
};

// Sizes of a result: what the caller allocates (padded_channels for blocked ones).
struct Shape {
  int64_t n = 0, c = 0, h = 0, w = 0;
};

class Conv {
 public:
  virtual ~Conv() = default;
  virtual Shape output() const = 0;
  virtual size_t scratchpad_bytes() const = 0;
  virtual size_t packed_weights_bytes() const = 0;
  // oneDNN's name for the implementation it picked ("jit:avx2", "jit_1x1:avx512_core", ...);
  // "ref:any" is its reference loop, far slower than aten's convolution.
  virtual const std::string& implementation() const = 0;
  // Whether `other` packs its weights the same way (the packing can then be shared).
  virtual bool same_packing(const Conv& other) const = 0;
  // The weight (O x C/groups x kh x kw, contiguous) in the layout this convolution reads. With
  // `scales` (O floats: a batch norm folded in), each output channel's weights are multiplied by
  // its scale as they are packed, bit for bit what packing the folded weight gives. Returns false,
  // writing nothing, where it cannot scale (the caller folds first); true otherwise. With `packed`
  // rows (`rows_packed`), it packs in slices of output channels where its layout allows
  // (kPackingSliceBytes of the weight each) and calls rows_packed(first, count) after each: the
  // caller may give back the pages of the rows read (a 512 -> 512 layer's whole weight was
  // resnet18's tuned planning peak); once with all rows where it packs in one piece.
  using RowsPacked = std::function<void(int64_t first, int64_t count)>;
  virtual bool pack_weights(const float* weight, void* packed, const float* scales,
                            const RowsPacked& rows_packed) const = 0;
  virtual void run(const float* input, const void* packed_weights, const float* bias,
                   const float* residual, float* output, void* scratchpad) const = 0;
};
// Throws std::runtime_error (oneDNN's message) for a shape oneDNN does not take.
std::shared_ptr<const Conv> conv(const ConvSpec& spec);

// A convolution on plain NCHW tensors computed in parts (memory "min":
// torch_ext/memory_min/sliced_ops.cc): bands of output rows or slices of output channels, each
// through the layouts oneDNN picks for it (format "any", as aten's oneDNN path asks), so the input
// and output in those layouts and the re-laid-out weights are a part's, not the whole's. Dense
// (groups 1) or depthwise (groups == c == out_channels; a slice then reads its own input channels).
struct SlicedConvSpec {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t out_channels = 0, kh = 0, kw = 0, groups = 1;
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  bool bias = false;
  int64_t band_rows = 0;       // output rows a part; 0: all
  int64_t slice_channels = 0;  // output channels a part; 0: all
};
class SlicedConv {
 public:
  virtual ~SlicedConv() = default;
  virtual Shape output() const = 0;
  // Bytes of the buffers run() takes, each the largest any part needs (0: none needed).
  struct Buffers {
    size_t input = 0, weights = 0, output = 0, scratchpad = 0;
  };
  virtual Buffers buffers() const = 0;
  virtual size_t parts() const = 0;
  // Called before part i runs (after = false) and once it is done (after = true): a memory budget
  // loads the next part's weights and drops the last one's (parts in output-channel order).
  using PartHook = void (*)(void* context, size_t part, bool after);
  // input, output: dense NCHW; weight: dense O x C/groups x kh x kw; bias: O floats, read only
  // with spec.bias. hook may be null.
  virtual void run(const float* input, const float* weight, const float* bias, float* output,
                   void* input_part, void* weights_part, void* output_part, void* scratchpad,
                   PartHook hook, void* context) const = 0;
};
// Throws std::runtime_error where oneDNN takes no part's shape.
std::shared_ptr<const SlicedConv> sliced_conv(const SlicedConvSpec& spec);
// The numbers that define a spec, for keys (sliced_conv's cache adds the thread count).
std::vector<int64_t> spec_key(const SlicedConvSpec& spec);

// A matrix product with a constant right operand (a linear layer): out (M x N, row stride ldc) =
// a (M x K, row stride lda) x W^T + bias, then the post-ops (activations; kResidualSum adds what
// out held), W (N x K, as aten::linear takes it) packed once in the layout oneDNN's matmul reads
// (its brgemm kernels on AVX-512 and AVX2).
struct MatmulSpec {
  int64_t m = 0, k = 0, n = 0, lda = 0, ldc = 0;
  bool bias = false;
  std::vector<PostOp> post;
};
class Matmul {
 public:
  virtual ~Matmul() = default;
  virtual size_t scratchpad_bytes() const = 0;
  virtual size_t packed_weights_bytes() const = 0;
  virtual const std::string& implementation() const = 0;
  // Whether `other` packs its weights the same way (the packing can then be shared).
  virtual bool same_packing(const Matmul& other) const = 0;
  // w: N x K floats, element (n, k) at w[n * stride_n + k * stride_k].
  virtual void pack_weights(const float* w, int64_t stride_n, int64_t stride_k,
                            void* packed) const = 0;
  // bias: N floats, read only with spec.bias.
  virtual void run(const float* a, const void* packed_weights, const float* bias, float* out,
                   void* scratchpad) const = 0;
};
// Throws std::runtime_error (oneDNN's message) for a product oneDNN does not take.
std::shared_ptr<const Matmul> matmul(const MatmulSpec& spec);

enum class PoolKind { kMax, kAvgIncludePadding, kAvgExcludePadding };
struct PoolSpec {
  int64_t n = 0, c = 0, h = 0, w = 0;
  PoolKind kind = PoolKind::kMax;
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding_l[2] = {0, 0}, padding_r[2] = {0, 0};
  Format format = Format::kBlocked;  // of the input and the output
};
// What every primitive but the convolution shares: its input(s) and output in one Format.
class Primitive {
 public:
  virtual ~Primitive() = default;
  virtual Shape output() const = 0;
  virtual size_t scratchpad_bytes() const = 0;
  // One or two inputs (binary: src0, src1), one output.
  virtual void run(const float* input, const float* input1, float* output,
                   void* scratchpad) const = 0;
};
std::shared_ptr<const Primitive> pool(const PoolSpec& spec);

// A chain of elementwise functions (the first out of place, the rest in place).
std::shared_ptr<const Primitive> eltwise(Shape shape, const std::vector<PostOp>& chain,
                                         Format format = Format::kBlocked);

// a (op) b, a N x C x H x W, b N x C x H x W or N x C x 1 x 1 (broadcast), both in `format`, then
// the elementwise post-ops.
enum class BinaryKind { kAdd, kMul };
std::shared_ptr<const Primitive> binary(BinaryKind kind, Shape a, Shape b,
                                        const std::vector<PostOp>& post,
                                        Format format = Format::kBlocked);

// A conversion from one layout to another (dense plain tensors; `from` != `to`).
std::shared_ptr<const Primitive> reorder(Shape shape, Format from, Format to);

// Whether oneDNN computes right on this CPU in the layouts and with the epilogues asked of it
// here: linears with their activations; convolutions dense, depthwise and pointwise, from plain
// and blocked inputs, a batch norm's scales packed in, a residual added; a pooling, a binary add,
// the conversions; each on small operands against a double-precision loop (self_check.cc). "" where
// all agree, else the first difference. block_size() runs it once on the block the CPU gives.
// `corrupt` (tests) alters each result before it is compared.
std::string self_check(const std::function<void(float*, size_t)>& corrupt = {});

// A one-line description of the oneDNN in use (version, ISA, block), for reports.
std::string describe();

// The primitives' census. Every primitive above is made once per key and kept for the next call
// that asks for it, with its JIT code; a measurement makes candidates that no pass will ask for
// again (mobilenet_v2's layout and Winograd candidates: several MiB). next_primitive_epoch()
// starts an epoch and returns it; forget_primitives(made_since, used_since) drops from the caches
// every primitive made in an epoch >= made_since that no call asked for in an epoch >= used_since
// (freed once no one else holds it; asked for again, it is made again).
uint64_t next_primitive_epoch();
void forget_primitives(uint64_t made_since, uint64_t used_since);
// How many times forget_primitives ran: a caller that keeps a primitive it asked for (weakly)
// asks again once this moved.
uint64_t primitives_forgotten();

}  // namespace memoplan::onednn

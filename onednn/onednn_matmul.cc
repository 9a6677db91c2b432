// The matrix product with packed weights (onednn.h's Matmul): oneDNN's matmul primitive, its
// weights in the layout it picks ("any": its brgemm kernels' blocked panels), the epilogue as
// post-ops, cached per shape, strides, epilogue and thread count.
#include <vector>

#include "onednn_common.h"

namespace memoplan::onednn {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file's whole vocabulary

class MatmulImpl final : public Matmul {
 public:
  explicit MatmulImpl(const MatmulSpec& s) : spec_(s) {
    if (s.m <= 0 || s.k <= 0 || s.n <= 0 || s.lda < s.k || s.ldc < s.n) {
      throw std::invalid_argument("memoplan: matmul with empty or overlapping rows");
    }
    const memory::desc src({s.m, s.k}, dt::f32, memory::dims{s.lda, 1});
    const memory::desc dst({s.m, s.n}, dt::f32, memory::dims{s.ldc, 1});
    const memory::desc weights_any({s.k, s.n}, dt::f32, tag::any);
    const memory::desc bias({1, s.n}, dt::f32, tag::ab);
    const dnnl::primitive_attr attr = attributes(s.post, nullptr);
#if DNNL_VERSION_MAJOR >= 3
    pd_ = s.bias ? dnnl::matmul::primitive_desc(engine(), src, weights_any, bias, dst, attr)
                 : dnnl::matmul::primitive_desc(engine(), src, weights_any, dst, attr);
#else
    const dnnl::matmul::desc d = s.bias ? dnnl::matmul::desc(src, weights_any, bias, dst)
                                        : dnnl::matmul::desc(src, weights_any, dst);
    pd_ = dnnl::matmul::primitive_desc(d, attr, engine());
#endif
    // What the calls ask for, read from the descriptor once (onednn_conv.cc).
    weights_desc_ = pd_.weights_desc();
    scratchpad_bytes_ = pd_.scratchpad_desc().get_size();
    dst_bytes_ = pd_.dst_desc().get_size();
    implementation_ = pd_.impl_info_str();
    // Its reference loop (no JIT kernel for this ISA or these strides) is no candidate.
    if (implementation().rfind("ref", 0) == 0) {
      throw std::runtime_error("memoplan: oneDNN has only its reference matmul (" +
                               implementation() + ") here");
    }
    primitive_ = dnnl::matmul(pd_);
    sums_ = std::any_of(s.post.begin(), s.post.end(),
                        [](const PostOp& op) { return op.kind == kResidualSum; });
    // Only the arguments the primitive reads: one bound to no data fails its execution.
    std::vector<std::pair<int, memory::desc>> args = {{DNNL_ARG_SRC, pd_.src_desc()},
                                                      {DNNL_ARG_WEIGHTS, pd_.weights_desc()},
                                                      {DNNL_ARG_DST, pd_.dst_desc()}};
    if (s.bias) args.emplace_back(DNNL_ARG_BIAS, bias);
    if (scratchpad_bytes() > 0) args.emplace_back(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc());
    args_ = std::make_unique<const BoundArgs>(std::move(args));
  }

  size_t scratchpad_bytes() const override { return scratchpad_bytes_; }
  size_t packed_weights_bytes() const override { return weights_desc_.get_size(); }
  const std::string& implementation() const override { return implementation_; }
  bool same_packing(const Matmul& other) const override {
    const auto* o = dynamic_cast<const MatmulImpl*>(&other);
    return o != nullptr && (o == this || o->weights_desc_ == weights_desc_);
  }
  void pack_weights(const float* w, int64_t stride_n, int64_t stride_k,
                    void* packed) const override {
    // W^T, K x N, read through W's strides.
    const memory::desc user({spec_.k, spec_.n}, dt::f32, memory::dims{stride_k, stride_n});
    reorder_into(user, w, weights_desc_, packed);
  }
  void run(const float* a, const void* packed_weights, const float* bias, float* out,
           void* scratchpad) const override {
    // In args_'s order: source, weights, destination, then the bias and the scratchpad where bound.
    const void* data[] = {a, packed_weights, out, spec_.bias ? bias : scratchpad, scratchpad};
    execute(primitive_, *args_, data, threads_, sums_, out, dst_bytes_);
  }

 private:
  memory::desc weights_desc_;
  size_t scratchpad_bytes_ = 0, dst_bytes_ = 0;
  std::string implementation_;
  ThreadChoice threads_;
  MatmulSpec spec_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul primitive_;
  bool sums_ = false;  // kResidualSum: the output is read too
  std::unique_ptr<const BoundArgs> args_;
};

}  // namespace

std::shared_ptr<const Matmul> matmul(const MatmulSpec& s) {
  Key key = {s.m, s.k, s.n, s.lda, s.ldc, s.bias ? 1 : 0, threads()};
  append(key, s.post);
  return cached<Matmul>("matmul", std::move(key), [&] { return std::make_shared<MatmulImpl>(s); });
}

}  // namespace memoplan::onednn

// oneDNN primitives on the blocked and plain layouts (onednn.h) but the convolution
// (onednn_conv.cc): pooling, elementwise chains, binary ops, conversions, the block size. The API
// moved between 2.x and 3.x (operation descriptors gone, post-op eltwise without a scale): the two
// spellings sit side by side where a primitive is made, nowhere else.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <unordered_map>

#include "onednn_common.h"

namespace memoplan::onednn {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file's whole vocabulary

// A primitive measured for its thread count (ThreadChoice) as one unit.
class Measured final : public Primitive {
 public:
  explicit Measured(std::shared_ptr<const Primitive> inner) : inner_(std::move(inner)) {}
  Shape output() const override { return inner_->output(); }
  size_t scratchpad_bytes() const override { return inner_->scratchpad_bytes(); }
  void run(const float* input, const float* input1, float* output,
           void* scratchpad) const override {
    threads_.run([&] { inner_->run(input, input1, output, scratchpad); });
  }

 private:
  std::shared_ptr<const Primitive> inner_;
  ThreadChoice threads_;
};

// A primitive with one source (and maybe a second), one destination.
class Simple final : public Primitive {
 public:
  Simple(dnnl::primitive primitive, memory::desc src, memory::desc src1, memory::desc dst,
         memory::desc scratchpad, Shape out, int src1_arg)
      : primitive_(std::move(primitive)),
        src_(std::move(src)),
        src1_(std::move(src1)),
        dst_(std::move(dst)),
        scratchpad_(std::move(scratchpad)),
        out_(out),
        src1_arg_(src1_arg) {
    std::vector<std::pair<int, memory::desc>> args = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    if (src1_arg_ != 0) args.emplace_back(src1_arg_, src1_);
    if (scratchpad_.get_size() > 0) args.emplace_back(DNNL_ARG_SCRATCHPAD, scratchpad_);
    args_ = std::make_unique<const BoundArgs>(std::move(args));
  }
  Shape output() const override { return out_; }
  size_t scratchpad_bytes() const override { return scratchpad_.get_size(); }
  void run(const float* input, const float* input1, float* output,
           void* scratchpad) const override {
    const void* data[] = {input, output, src1_arg_ != 0 ? input1 : scratchpad, scratchpad};
    args_->run(primitive_, data);
  }

 private:
  dnnl::primitive primitive_;
  memory::desc src_, src1_, dst_, scratchpad_;
  Shape out_;
  int src1_arg_ = 0;
  std::unique_ptr<const BoundArgs> args_;
};

// A chain of primitives on one tensor: the first writes the output, the rest update it in place.
class Chain final : public Primitive {
 public:
  explicit Chain(std::vector<std::shared_ptr<const Primitive>> links) : links_(std::move(links)) {}
  Shape output() const override { return links_.back()->output(); }
  size_t scratchpad_bytes() const override {
    size_t most = 0;
    for (const auto& l : links_) most = std::max(most, l->scratchpad_bytes());
    return most;
  }
  void run(const float* input, const float* input1, float* output,
           void* scratchpad) const override {
    links_.front()->run(input, input1, output, scratchpad);
    for (size_t i = 1; i < links_.size(); ++i) links_[i]->run(output, nullptr, output, scratchpad);
  }

 private:
  std::vector<std::shared_ptr<const Primitive>> links_;
};

std::shared_ptr<const Primitive> make_eltwise_step(Shape s, const EltwiseStep& step, Format f) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::desc d = desc(s, f);
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::eltwise_forward::primitive_desc pd(engine(), prop_kind::forward_inference, step.alg,
                                                 d, d, step.alpha, step.beta, attr);
#else
  const dnnl::eltwise_forward::desc op(prop_kind::forward_inference, step.alg, d, step.alpha,
                                       step.beta);
  const dnnl::eltwise_forward::primitive_desc pd(op, attr, engine());
#endif
  return std::make_shared<Simple>(dnnl::eltwise_forward(pd), d, memory::desc(), d,
                                  pd.scratchpad_desc(), s, 0);
}

// ISAs are bit sets (avx2_vnni is 0x407 in 2.x: numerically above avx512_core's 0x27).
bool has_isa(dnnl::cpu_isa bits) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(bits)) == static_cast<unsigned>(bits);
}

int detect_block_size() {
  if (const char* forced = std::getenv("MEMOPLAN_BLOCKED_LAYOUT")) {
    const std::string v = forced;
    if (v == "0" || v == "16") return std::stoi(v);
    if (v == "8") {
      // As on an AVX2 machine: oneDNN 2.6's AVX-512 binary kernel with a post-op writes past an
      // nChw8c tensor of 24 channels (heap corruption), so oneDNN is held to AVX2 where it still
      // can be (no kernel made yet); else the CPU's own block.
      (void)dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
      if (!has_isa(dnnl::cpu_isa::avx512_core)) return 8;
      std::fprintf(stderr,
                   "memoplan: MEMOPLAN_BLOCKED_LAYOUT=8 ignored: oneDNN already runs AVX-512 "
                   "kernels in this process (set it before the first tuned plan)\n");
    }
  }
  if (has_isa(dnnl::cpu_isa::avx512_core)) return 16;
  if (has_isa(dnnl::cpu_isa::avx2)) return 8;
  return 0;
}

// The detected block once self_check() has passed on it; else block 0 and the failure, said once on
// stderr: a library that computes wrong on this CPU is not used (CI's Debian 13 stage on an AMD
// EPYC Zen 4 VM, oneDNN 3.7.2: the tuned linears and blocked regions 19-21% off stock; the same
// build passes on a Xeon).
struct Checked {
  int block = 0;
  std::string failure;
};

Checked check_block() {
  if (layout_block() == 0) return {};
  Checked c{0, self_check()};
  if (c.failure.empty()) {
    c.block = layout_block();
    return c;
  }
  const dnnl_version_t* v = dnnl_version();
  std::fprintf(stderr,
               "memoplan: oneDNN %d.%d.%d computes wrong results on this CPU (%s): its kernels "
               "are off in this process (no blocked layout, no oneDNN matmul; the tuned path runs "
               "aten's and memoplan's own kernels)\n",
               v->major, v->minor, v->patch, c.failure.c_str());
  return c;
}

const Checked& checked() {
  static const Checked c = check_block();
  return c;
}

}  // namespace

int detail::layout_block() {
  static const int block = detect_block_size();
  return block;
}

int block_size() { return checked().block; }

int64_t padded_channels(int64_t channels) {
  const int64_t b = block_size() > 0 ? block_size() : 1;
  return (channels + b - 1) / b * b;
}

std::shared_ptr<const Primitive> pool(const PoolSpec& s) {
  Key key = {s.n,
             s.c,
             s.h,
             s.w,
             static_cast<int64_t>(s.kind),
             s.kernel[0],
             s.kernel[1],
             s.stride[0],
             s.stride[1],
             s.padding_l[0],
             s.padding_l[1],
             s.padding_r[0],
             s.padding_r[1],
             static_cast<int64_t>(s.format),
             threads()};
  return cached<Primitive>("pooling", std::move(key), [&]() -> std::shared_ptr<const Primitive> {
    const Shape out = {s.n, s.c,
                       (s.h + s.padding_l[0] + s.padding_r[0] - s.kernel[0]) / s.stride[0] + 1,
                       (s.w + s.padding_l[1] + s.padding_r[1] - s.kernel[1]) / s.stride[1] + 1};
    const algorithm alg = s.kind == PoolKind::kMax ? algorithm::pooling_max
                          : s.kind == PoolKind::kAvgIncludePadding
                              ? algorithm::pooling_avg_include_padding
                              : algorithm::pooling_avg_exclude_padding;
    const memory::desc src = desc({s.n, s.c, s.h, s.w}, s.format);
    const memory::desc dst = desc(out, s.format);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const memory::dims strides = {s.stride[0], s.stride[1]}, kernel = {s.kernel[0], s.kernel[1]},
                       pl = {s.padding_l[0], s.padding_l[1]}, pr = {s.padding_r[0], s.padding_r[1]};
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::pooling_forward::primitive_desc pd(engine(), prop_kind::forward_inference, alg, src,
                                                   dst, strides, kernel, {0, 0}, pl, pr, attr);
#else
    const dnnl::pooling_forward::desc op(prop_kind::forward_inference, alg, src, dst, strides,
                                         kernel, pl, pr);
    const dnnl::pooling_forward::primitive_desc pd(op, attr, engine());
#endif
    return std::make_shared<Measured>(std::make_shared<Simple>(
        dnnl::pooling_forward(pd), src, memory::desc(), dst, pd.scratchpad_desc(), out, 0));
  });
}

std::shared_ptr<const Primitive> eltwise(Shape s, const std::vector<PostOp>& chain, Format f) {
  Key key = {s.n, s.c, s.h, s.w, static_cast<int64_t>(f), threads()};
  append(key, chain);
  return cached<Primitive>("elementwise op", std::move(key), [&] {
    std::vector<std::shared_ptr<const Primitive>> links;
    for (const PostOp& op : chain) {
      for (const EltwiseStep& step : steps(op)) links.push_back(make_eltwise_step(s, step, f));
    }
    if (links.empty()) throw std::invalid_argument("memoplan: empty elementwise chain");
    return std::make_shared<Measured>(std::make_shared<Chain>(std::move(links)));
  });
}

std::shared_ptr<const Primitive> binary(BinaryKind kind, Shape a, Shape b,
                                        const std::vector<PostOp>& post, Format f) {
  Key key = {static_cast<int64_t>(kind), a.n,      a.c, a.h, a.w, b.n, b.c, b.h, b.w,
             static_cast<int64_t>(f),    threads()};
  append(key, post);
  return cached<Primitive>("binary op", std::move(key), [&] {
    const memory::desc src0 = desc(a, f), src1 = desc(b, f);
    const algorithm alg = kind == BinaryKind::kAdd ? algorithm::binary_add : algorithm::binary_mul;
    const dnnl::primitive_attr attr = attributes(post, nullptr);
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::binary::primitive_desc pd(engine(), alg, src0, src1, src0, attr);
#else
    const dnnl::binary::desc op(alg, src0, src1, src0);
    const dnnl::binary::primitive_desc pd(op, attr, engine());
#endif
    return std::make_shared<Measured>(std::make_shared<Simple>(
        dnnl::binary(pd), src0, src1, src0, pd.scratchpad_desc(), a, DNNL_ARG_SRC_1));
  });
}

std::shared_ptr<const Primitive> reorder(Shape s, Format from, Format to) {
  const Key key = {s.n,      s.c, s.h, s.w, static_cast<int64_t>(from), static_cast<int64_t>(to),
                   threads()};
  return cached<Primitive>("conversion", key, [&] {
    const memory::desc src = desc(s, from), dst = desc(s, to);
    const dnnl::reorder::primitive_desc pd(engine(), src, engine(), dst);
    return std::make_shared<Measured>(std::make_shared<Simple>(
        dnnl::reorder(pd), src, memory::desc(), dst, memory::desc(), s, 0));
  });
}

namespace {
std::mutex caches_mutex;
std::vector<detail::Forget>& caches() {
  static auto* all = new std::vector<detail::Forget>();
  return *all;
}
}  // namespace

void detail::register_cache(Forget forget) {
  std::lock_guard<std::mutex> lock(caches_mutex);
  caches().push_back(forget);
}

uint64_t next_primitive_epoch() { return detail::primitive_epoch().fetch_add(1) + 1; }

namespace {
std::atomic<uint64_t> forgotten{0};
}  // namespace

uint64_t primitives_forgotten() { return forgotten.load(std::memory_order_acquire); }

void forget_primitives(uint64_t made_since, uint64_t used_since) {
  forgotten.fetch_add(1, std::memory_order_acq_rel);
  std::vector<detail::Forget> all;
  {
    std::lock_guard<std::mutex> lock(caches_mutex);
    all = caches();
  }
  for (detail::Forget forget : all) forget(made_since, used_since);
  // oneDNN keeps every primitive made in a cache of its own (DNNL_PRIMITIVE_CACHE_CAPACITY, 1024
  // by default), JIT code and all: what was forgotten above would live on there (traced resnet18
  // tuned: 3 MiB). A capacity of 0 empties it; set back at once. Primitives someone holds (these
  // caches', LibTorch's) live on; one asked for again is made again (its JIT, once).
  int capacity = 0;
  if (dnnl_get_primitive_cache_capacity(&capacity) == dnnl_success && capacity > 0) {
    dnnl_set_primitive_cache_capacity(0);
    dnnl_set_primitive_cache_capacity(capacity);
  }
}

std::string describe() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream out;
  out << "oneDNN " << v->major << "." << v->minor << "." << v->patch << ", blocked layout ";
  if (!checked().failure.empty()) {
    out << "off: oneDNN failed memoplan's self-check on this CPU (" << checked().failure << ")";
  } else if (block_size() == 0) {
    out << "off";
  } else {
    out << "nChw" << block_size() << "c";
  }
  return out.str();
}

}  // namespace memoplan::onednn

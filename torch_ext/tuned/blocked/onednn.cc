// oneDNN primitives on the blocked layout (onednn.h). The API moved between 2.x and 3.x (operation
// descriptors gone, post-op eltwise without a scale): the two spellings sit side by side in the
// make_* helpers below, nowhere else.
#include "onednn.h"

#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace memoplan::torch_ext::onednn {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

constexpr bool kOneDnn3 = DNNL_VERSION_MAJOR >= 3;

// The threads oneDNN would split a primitive over now: part of every cache key (a primitive made
// for one thread count may be laid out for it).
int64_t threads() {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
  return omp_get_max_threads();
#else
  return 0;
#endif
}

const dnnl::engine& engine() {
  static const dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  return *e;
}

// One stream per calling thread (a stream is not to be shared between threads).
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Whether a primitive runs on every intra-op thread or on the calling one alone, measured on its
// first calls: a small op (a squeeze-excitation's 1x1 convolutions, a 7x7 pooling) loses more to
// waking the other threads than it gains from them. Each run is repeated in the measurement, so
// it must be idempotent: every primitive here reads its inputs and writes a separate output.
class ThreadChoice {
 public:
  template <typename Run>
  void run(const Run& once) const {
    const int n = static_cast<int>(threads());
    if (n <= 1) {
      once();
      return;
    }
    int choice = choice_.load(std::memory_order_relaxed);
    if (choice == kUnmeasured) choice = measure(once, n);
    if (choice == kAll) {
      once();
      return;
    }
    OneThread alone(n);
    once();
  }

 private:
  enum : int { kUnmeasured, kOne, kAll };
  struct OneThread {  // this thread's parallel regions on one thread, until the end of the scope
    explicit OneThread(int n) : n_(n) { set(1); }
    ~OneThread() { set(n_); }
    static void set(int n) {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
      omp_set_num_threads(n);
#else
      (void)n;
#endif
    }
    int n_;
  };
  template <typename Run>
  int measure(const Run& once, int n) const {
    using Clock = std::chrono::steady_clock;
    double one = 1e300, all = 1e300;
    for (int round = 0; round < 3; ++round) {  // interleaved; the fastest of each
      Clock::time_point start = Clock::now();
      once();
      all = std::min(all, std::chrono::duration<double>(Clock::now() - start).count());
      OneThread alone(n);
      start = Clock::now();
      once();
      one = std::min(one, std::chrono::duration<double>(Clock::now() - start).count());
    }
    const int choice = one <= all ? kOne : kAll;
    choice_.store(choice, std::memory_order_relaxed);
    return choice;
  }
  mutable std::atomic<int> choice_{kUnmeasured};
};

tag blocked_tag() { return block_size() == 16 ? tag::nChw16c : tag::nChw8c; }
tag plain_tag(Plain p) { return p == Plain::kNhwc ? tag::nhwc : tag::nchw; }

memory::desc desc(Shape s, tag t) { return memory::desc({s.n, s.c, s.h, s.w}, dt::f32, t); }

memory bind(const memory::desc& d, const void* data) {
  return memory(d, engine(), const_cast<void*>(data));
}

// Post-ops: the eltwise steps (hardsigmoid is two), the residual a binary add.
void append_eltwise(dnnl::post_ops& ops, algorithm alg, float alpha, float beta) {
#if DNNL_VERSION_MAJOR >= 3
  ops.append_eltwise(alg, alpha, beta);
#else
  ops.append_eltwise(1.f, alg, alpha, beta);
#endif
}

struct EltwiseStep {
  algorithm alg;
  float alpha, beta;
};
std::vector<EltwiseStep> steps(const PostOp& op) {
  switch (static_cast<Eltwise>(op.kind)) {
    case Eltwise::kRelu:
      return {{algorithm::eltwise_relu, op.alpha, 0.f}};
    case Eltwise::kClip:
      return {{algorithm::eltwise_clip, op.alpha, op.beta}};
    case Eltwise::kHardswish:
      // 3.x: x * clip(alpha x + beta, 0, 1); 2.x: the fixed x * relu6(x + 3) / 6.
      return {{algorithm::eltwise_hardswish, kOneDnn3 ? 1.f / 6.f : 0.f, kOneDnn3 ? 0.5f : 0.f}};
    case Eltwise::kHardsigmoid:
      return {{algorithm::eltwise_linear, 1.f / 6.f, 0.5f}, {algorithm::eltwise_clip, 0.f, 1.f}};
    case Eltwise::kSigmoid:
      return {{algorithm::eltwise_logistic, 0.f, 0.f}};
    case Eltwise::kSilu:
      return {{algorithm::eltwise_swish, 1.f, 0.f}};
    case Eltwise::kGelu:
      return {{algorithm::eltwise_gelu_erf, 0.f, 0.f}};
    case Eltwise::kTanh:
      return {{algorithm::eltwise_tanh, 0.f, 0.f}};
  }
  throw std::invalid_argument("memoplan: unknown elementwise kind " + std::to_string(op.kind));
}

dnnl::primitive_attr attributes(const std::vector<PostOp>& post, const memory::desc* residual) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  for (const PostOp& op : post) {
    if (op.kind == kResidualAdd) {
      ops.append_binary(algorithm::binary_add, *residual);
    } else {
      for (const EltwiseStep& s : steps(op)) append_eltwise(ops, s.alg, s.alpha, s.beta);
    }
  }
  attr.set_post_ops(ops);
  return attr;
}

// The argument slot of the residual: its post-op's index.
int residual_slot(const std::vector<PostOp>& post) {
  int index = 0;
  for (const PostOp& op : post) {
    if (op.kind == kResidualAdd) return index;
    index += op.kind == static_cast<int>(Eltwise::kHardsigmoid) ? 2 : 1;
  }
  return -1;
}

memory scratch(const memory::desc& d, void* data) { return bind(d, data); }

class ConvImpl final : public Conv {
 public:
  explicit ConvImpl(const ConvSpec& s) : spec_(s) {
    const int64_t oh = (s.h + 2 * s.padding[0] - s.dilation[0] * (s.kh - 1) - 1) / s.stride[0] + 1;
    const int64_t ow = (s.w + 2 * s.padding[1] - s.dilation[1] * (s.kw - 1) - 1) / s.stride[1] + 1;
    if (oh <= 0 || ow <= 0) throw std::invalid_argument("memoplan: convolution output is empty");
    out_ = {s.n, s.out_channels, oh, ow};
    const memory::desc src =
        desc({s.n, s.c, s.h, s.w}, s.input_blocked ? blocked_tag() : plain_tag(s.input_plain));
    const memory::desc dst = desc(out_, blocked_tag());
    memory::dims wdims = {s.out_channels, s.c / s.groups, s.kh, s.kw};
    user_weights_tag_ = tag::oihw;
    if (s.groups > 1) {
      wdims = {s.groups, s.out_channels / s.groups, s.c / s.groups, s.kh, s.kw};
      user_weights_tag_ = tag::goihw;
    }
    user_weights_ = memory::desc(wdims, dt::f32, user_weights_tag_);
    const memory::desc weights_any(wdims, dt::f32, tag::any);
    const memory::desc bias({s.out_channels}, dt::f32, tag::x);
    const memory::dims strides = {s.stride[0], s.stride[1]};
    const memory::dims dilation = {s.dilation[0] - 1, s.dilation[1] - 1};
    const memory::dims padding = {s.padding[0], s.padding[1]};
    const dnnl::primitive_attr attr = attributes(s.post, &dst);
#if DNNL_VERSION_MAJOR >= 3
    pd_ = dnnl::convolution_forward::primitive_desc(
        engine(), prop_kind::forward_inference, algorithm::convolution_direct, src, weights_any,
        bias, dst, strides, dilation, padding, padding, attr);
#else
    const dnnl::convolution_forward::desc d(prop_kind::forward_inference,
                                            algorithm::convolution_direct, src, weights_any, bias,
                                            dst, strides, dilation, padding, padding);
    pd_ = dnnl::convolution_forward::primitive_desc(d, attr, engine());
#endif
    primitive_ = dnnl::convolution_forward(pd_);
    residual_slot_ = residual_slot(s.post);
  }

  Shape output() const override { return out_; }
  size_t scratchpad_bytes() const override { return pd_.scratchpad_desc().get_size(); }
  size_t packed_weights_bytes() const override { return pd_.weights_desc().get_size(); }
  std::string implementation() const override { return pd_.impl_info_str(); }
  bool same_packing(const Conv& other) const override {
    const auto* o = dynamic_cast<const ConvImpl*>(&other);
    return o != nullptr && o->pd_.weights_desc() == pd_.weights_desc();
  }
  void pack_weights(const float* weight, void* packed) const override {
    memory from = bind(user_weights_, weight), to = bind(pd_.weights_desc(), packed);
    dnnl::reorder(from, to).execute(stream(), from, to);
    stream().wait();
  }
  void run(const float* input, const void* packed_weights, const float* bias, const float* residual,
           float* output, void* scratchpad) const override {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, bind(pd_.src_desc(), input)},
        {DNNL_ARG_WEIGHTS, bind(pd_.weights_desc(), packed_weights)},
        {DNNL_ARG_BIAS, bind(pd_.bias_desc(), bias)},
        {DNNL_ARG_DST, bind(pd_.dst_desc(), output)},
        {DNNL_ARG_SCRATCHPAD, scratch(pd_.scratchpad_desc(), scratchpad)}};
    if (residual_slot_ >= 0) {
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_slot_) | DNNL_ARG_SRC_1,
                   bind(pd_.dst_desc(), residual));
    }
    threads_.run([&] {
      primitive_.execute(stream(), args);
      stream().wait();
    });
  }

 private:
  ThreadChoice threads_;
  ConvSpec spec_;
  Shape out_;
  tag user_weights_tag_ = tag::oihw;
  memory::desc user_weights_;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::convolution_forward primitive_;
  int residual_slot_ = -1;
};

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
        src1_arg_(src1_arg) {}
  Shape output() const override { return out_; }
  size_t scratchpad_bytes() const override { return scratchpad_.get_size(); }
  void run(const float* input, const float* input1, float* output,
           void* scratchpad) const override {
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, bind(src_, input)},
                                            {DNNL_ARG_DST, bind(dst_, output)}};
    if (src1_arg_ != 0) args.emplace(src1_arg_, bind(src1_, input1));
    if (scratchpad_.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, scratch(scratchpad_, scratchpad));
    }
    primitive_.execute(stream(), args);
    stream().wait();
  }

 private:
  dnnl::primitive primitive_;
  memory::desc src_, src1_, dst_, scratchpad_;
  Shape out_;
  int src1_arg_ = 0;
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

std::shared_ptr<const Primitive> make_eltwise_step(Shape s, const EltwiseStep& step) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::desc d = desc(s, blocked_tag());
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

// The cache: every primitive by the numbers that define it.
using Key = std::vector<int64_t>;
template <typename T, typename Make>
std::shared_ptr<const T> cached(const char* kind, Key key, Make make) {
  static std::mutex mutex;
  static auto* table = new std::map<std::pair<std::string, Key>, std::shared_ptr<const T>>();
  auto k = std::make_pair(std::string(kind), std::move(key));
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = table->find(k);
    if (it != table->end()) return it->second;
  }
  std::shared_ptr<const T> made;
  try {
    made = make();
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("memoplan: oneDNN cannot make this ") + kind + ": " +
                             e.what());
  }
  std::lock_guard<std::mutex> lock(mutex);
  return table->emplace(std::move(k), made).first->second;
}

void append(Key& key, const std::vector<PostOp>& post) {
  for (const PostOp& op : post) {
    key.push_back(op.kind);
    key.push_back(static_cast<int64_t>(op.alpha * 1e6f));
    key.push_back(static_cast<int64_t>(op.beta * 1e6f));
  }
}

int detect_block_size() {
  if (const char* forced = std::getenv("MEMOPLAN_BLOCKED_LAYOUT")) {
    const std::string v = forced;
    if (v == "0" || v == "8" || v == "16") return std::stoi(v);
  }
  // ISAs are bit sets (avx2_vnni is 0x407 in 2.x: numerically above avx512_core's 0x27).
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [&](dnnl::cpu_isa bits) {
    return (isa & static_cast<unsigned>(bits)) == static_cast<unsigned>(bits);
  };
  if (has(dnnl::cpu_isa::avx512_core)) return 16;
  if (has(dnnl::cpu_isa::avx2)) return 8;
  return 0;
}

}  // namespace

int block_size() {
  static const int block = detect_block_size();
  return block;
}

int64_t padded_channels(int64_t channels) {
  const int64_t b = block_size() > 0 ? block_size() : 1;
  return (channels + b - 1) / b * b;
}

std::shared_ptr<const Conv> conv(const ConvSpec& s) {
  Key key = {s.n,
             s.c,
             s.h,
             s.w,
             s.out_channels,
             s.kh,
             s.kw,
             s.groups,
             s.stride[0],
             s.stride[1],
             s.padding[0],
             s.padding[1],
             s.dilation[0],
             s.dilation[1],
             s.input_blocked,
             static_cast<int64_t>(s.input_plain),
             threads()};
  append(key, s.post);
  return cached<Conv>("convolution", std::move(key), [&] { return std::make_shared<ConvImpl>(s); });
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
             threads()};
  return cached<Primitive>("pooling", std::move(key), [&]() -> std::shared_ptr<const Primitive> {
    const Shape out = {s.n, s.c,
                       (s.h + s.padding_l[0] + s.padding_r[0] - s.kernel[0]) / s.stride[0] + 1,
                       (s.w + s.padding_l[1] + s.padding_r[1] - s.kernel[1]) / s.stride[1] + 1};
    const algorithm alg = s.kind == PoolKind::kMax ? algorithm::pooling_max
                          : s.kind == PoolKind::kAvgIncludePadding
                              ? algorithm::pooling_avg_include_padding
                              : algorithm::pooling_avg_exclude_padding;
    const memory::desc src = desc({s.n, s.c, s.h, s.w}, blocked_tag());
    const memory::desc dst = desc(out, blocked_tag());
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

std::shared_ptr<const Primitive> eltwise(Shape s, const std::vector<PostOp>& chain) {
  Key key = {s.n, s.c, s.h, s.w, threads()};
  append(key, chain);
  return cached<Primitive>("elementwise op", std::move(key), [&] {
    std::vector<std::shared_ptr<const Primitive>> links;
    for (const PostOp& op : chain) {
      for (const EltwiseStep& step : steps(op)) links.push_back(make_eltwise_step(s, step));
    }
    if (links.empty()) throw std::invalid_argument("memoplan: empty elementwise chain");
    return std::make_shared<Measured>(std::make_shared<Chain>(std::move(links)));
  });
}

std::shared_ptr<const Primitive> binary(BinaryKind kind, Shape a, Shape b,
                                        const std::vector<PostOp>& post) {
  Key key = {static_cast<int64_t>(kind), a.n, a.c, a.h, a.w, b.n, b.c, b.h, b.w, threads()};
  append(key, post);
  return cached<Primitive>("binary op", std::move(key), [&] {
    const memory::desc src0 = desc(a, blocked_tag()), src1 = desc(b, blocked_tag());
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

std::shared_ptr<const Primitive> to_blocked(Shape s, Plain from) {
  const Key key = {s.n, s.c, s.h, s.w, static_cast<int64_t>(from), 0, threads()};
  return cached<Primitive>("conversion", key, [&] {
    const memory::desc src = desc(s, plain_tag(from)), dst = desc(s, blocked_tag());
    const dnnl::reorder::primitive_desc pd(engine(), src, engine(), dst);
    return std::make_shared<Measured>(std::make_shared<Simple>(
        dnnl::reorder(pd), src, memory::desc(), dst, memory::desc(), s, 0));
  });
}

std::shared_ptr<const Primitive> to_plain(Shape s, Plain to) {
  const Key key = {s.n, s.c, s.h, s.w, static_cast<int64_t>(to), 1, threads()};
  return cached<Primitive>("conversion", key, [&] {
    const memory::desc src = desc(s, blocked_tag()), dst = desc(s, plain_tag(to));
    const dnnl::reorder::primitive_desc pd(engine(), src, engine(), dst);
    return std::make_shared<Measured>(std::make_shared<Simple>(
        dnnl::reorder(pd), src, memory::desc(), dst, memory::desc(), s, 0));
  });
}

std::string describe() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream out;
  out << "oneDNN " << v->major << "." << v->minor << "." << v->patch << ", blocked layout ";
  if (block_size() == 0) {
    out << "off";
  } else {
    out << "nChw" << block_size() << "c";
  }
  return out.str();
}

}  // namespace memoplan::torch_ext::onednn

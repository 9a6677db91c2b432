// What the oneDNN translation units share (onednn.cc: pooling, elementwise, binary,
// conversions; onednn_conv.cc: the convolution): the engine and per-thread stream, descriptors of
// the blocked and plain layouts, post-op attributes, the per-primitive thread choice and the
// primitive cache. Includes oneDNN; for those two files only.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memoplan/onednn/onednn.h"

namespace memoplan::onednn::detail {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

constexpr bool kOneDnn3 = DNNL_VERSION_MAJOR >= 3;

// The threads oneDNN would split a primitive over now: part of every cache key (a primitive made
// for one thread count may be laid out for it).
inline int64_t threads() {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
  return omp_get_max_threads();
#else
  return 0;
#endif
}

inline const dnnl::engine& engine() {
  static const dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  return *e;
}

// One stream per calling thread (a stream is not to be shared between threads).
inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Whether a primitive runs on every intra-op thread or on the calling one alone, measured on its
// first calls: a small op (a squeeze-excitation's 1x1 convolutions, a 7x7 pooling) loses more to
// waking the other threads than it gains from them. Each run is repeated in the measurement, so
// it must be idempotent: every primitive here reads its inputs and writes a separate output.
class ThreadChoice {
 public:
  // Whether run() has chosen (a run that is not idempotent must be made so until then).
  bool measured() const {
    return threads() <= 1 || choice_.load(std::memory_order_relaxed) != kUnmeasured;
  }
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

// The block of the blocked layout the primitives are made for: what the CPU's ISA gives (or
// MEMOPLAN_BLOCKED_LAYOUT forces), before self_check() passes it; block_size() is 0 where that
// check failed (onednn.cc).
int layout_block();

inline tag format_tag(Format f) {
  switch (f) {
    case Format::kNchw:
      return tag::nchw;
    case Format::kNhwc:
      return tag::nhwc;
    case Format::kBlocked:
      break;
  }
  return layout_block() == 16 ? tag::nChw16c : tag::nChw8c;
}

inline memory::desc desc(Shape s, Format f) {
  return memory::desc({s.n, s.c, s.h, s.w}, dt::f32, format_tag(f));
}

inline memory bind(const memory::desc& d, const void* data) {
  return memory(d, engine(), const_cast<void*>(data));
}

// A primitive's arguments, their memory objects made once and pointed anew at each call's data:
// making one (dnnl_memory_create) costs an aligned allocation, a small one and their frees, five
// or six times a convolution, which at a small layer is more than the layer's kernel. The call
// that finds the set free takes it; one that finds it taken (a second inference thread on the
// same primitive at that moment) binds memory objects of its own.
class BoundArgs {
 public:
  explicit BoundArgs(std::vector<std::pair<int, memory::desc>> descs) : descs_(std::move(descs)) {
    for (const auto& [arg, d] : descs_) memories_.emplace_back(d, engine(), nullptr);
    for (size_t i = 0; i < descs_.size(); ++i)
      args_.push_back({descs_[i].first, memories_[i].get()});
  }
  // Runs the primitive with argument i (in the order given at construction) pointed at data[i],
  // through oneDNN's C call (the C++ one copies a map of the arguments into a new vector first).
  void run(const dnnl::primitive& primitive, const void* const* data) const {
    if (!busy_.exchange(true, std::memory_order_acquire)) {
      struct Release {
        std::atomic<bool>& busy;
        ~Release() { busy.store(false, std::memory_order_release); }
      } release{busy_};
      for (size_t i = 0; i < memories_.size(); ++i)
        memories_[i].set_data_handle(const_cast<void*>(data[i]));
      execute(primitive, args_);
      return;
    }
    std::vector<memory> own;
    std::vector<dnnl_exec_arg_t> args;
    own.reserve(descs_.size());
    for (size_t i = 0; i < descs_.size(); ++i) {
      own.push_back(bind(descs_[i].second, data[i]));
      args.push_back({descs_[i].first, own.back().get()});
    }
    execute(primitive, args);
  }

 private:
  static void execute(const dnnl::primitive& primitive, const std::vector<dnnl_exec_arg_t>& args) {
    dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get(), stream().get(),
                                                   static_cast<int>(args.size()), args.data()),
                            "could not execute a primitive");
    stream().wait();
  }

  std::vector<std::pair<int, memory::desc>> descs_;
  std::vector<memory> memories_;  // handles: set_data_handle changes what args_ points at
  std::vector<dnnl_exec_arg_t> args_;
  mutable std::atomic<bool> busy_{false};
};

// Held while a primitive is made, whatever its kind. oneDNN hands a second thread that makes the
// same primitive the first one's from its own cache, in step with it through a future inside the
// library, which ThreadSanitizer cannot see (a race reported where there is none); and the second
// thread's JIT work would be wasted anyway. Recursive: a make may need another primitive.
inline std::recursive_mutex& making() {
  static std::recursive_mutex mutex;
  return mutex;
}

// Converts `from_data` in layout `from` into `to_data` in layout `to` (a weight packing). With
// `scales` (one per index of the dimensions `scale_mask` names, row-major: a weight's output
// channels), each element is multiplied by its scale on the way: a batch norm folded as the weight
// is packed, with no folded copy of it. Returns false, writing nothing, where oneDNN has no scaled
// reorder into `to` (the caller folds then); true otherwise.
inline bool reorder_into(const memory::desc& from, const void* from_data, const memory::desc& to,
                         void* to_data, const float* scales = nullptr, int64_t scale_count = 0,
                         int scale_mask = 0) {
  memory src = bind(from, from_data), dst = bind(to, to_data);
  dnnl::primitive_attr attr;
  std::unordered_map<int, memory> args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  if (scales) {
#if DNNL_VERSION_MAJOR >= 3
    attr.set_scales_mask(DNNL_ARG_SRC, scale_mask);
    args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC,
                 bind(memory::desc({scale_count}, dt::f32, tag::x), scales));
#else
    attr.set_output_scales(scale_mask, std::vector<float>(scales, scales + scale_count));
#endif
  }
  dnnl::reorder reorder;
  try {
    std::lock_guard<std::recursive_mutex> one_maker(making());
    reorder = dnnl::reorder(src, dst, attr);
  } catch (const dnnl::error&) {
    if (!scales) throw;
    return false;
  }
  reorder.execute(stream(), args);
  stream().wait();
  return true;
}

// Whether SiLU last in a convolution's epilogue runs as memoplan's kernel over the output after
// the call (kernels/silu.h) rather than as oneDNN's swish post-op: where that kernel has AVX-512
// (silu_choice.cc says why). MEMOPLAN_SILU=onednn or =memoplan decides instead.
bool silu_after_the_call();
// kernels::silu over `count` floats on this thread's OpenMP threads (one where the thread choice
// keeps a call on its own thread).
void silu_in_place(float* x, size_t count);

// One call of a primitive with weights: its arguments pointed at `data` (BoundArgs, in the order
// they were bound), on `threads`' choice, then SiLU over the output's `bytes` with `silu`. A call
// that adds to its output (`sums`: a sum post-op) is not idempotent: while the choice is measured
// (several runs), each run starts from what `output`'s `bytes` held before the first.
inline void execute(const dnnl::primitive& primitive, const BoundArgs& args,
                    const void* const* data, const ThreadChoice& threads, bool sums, void* output,
                    size_t bytes, bool silu = false) {
  auto once = [&] {
    args.run(primitive, data);
    if (silu) silu_in_place(static_cast<float*>(output), bytes / sizeof(float));
  };
  if (!sums || threads.measured()) {
    threads.run(once);
    return;
  }
  auto* out = static_cast<unsigned char*>(output);
  const std::vector<unsigned char> before(out, out + bytes);
  threads.run([&] {
    std::copy(before.begin(), before.end(), out);
    once();
  });
}

// Post-ops: the eltwise steps (hardsigmoid is two), the residual a binary add.
inline void append_eltwise(dnnl::post_ops& ops, algorithm alg, float alpha, float beta) {
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
inline std::vector<EltwiseStep> steps(const PostOp& op) {
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

inline dnnl::primitive_attr attributes(const std::vector<PostOp>& post,
                                       const memory::desc* residual) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  for (const PostOp& op : post) {
    if (op.kind == kResidualAdd) {
      ops.append_binary(algorithm::binary_add, *residual);
    } else if (op.kind == kResidualSum) {
      ops.append_sum(1.f);
    } else {
      for (const EltwiseStep& s : steps(op)) append_eltwise(ops, s.alg, s.alpha, s.beta);
    }
  }
  attr.set_post_ops(ops);
  return attr;
}

// The argument slot of the residual: its post-op's index.
inline int residual_slot(const std::vector<PostOp>& post) {
  int index = 0;
  for (const PostOp& op : post) {
    if (op.kind == kResidualAdd) return index;
    index += op.kind == static_cast<int>(Eltwise::kHardsigmoid) ? 2 : 1;
  }
  return -1;
}

// The census' epoch (next_primitive_epoch) and every cache's way to drop what it no longer uses
// (forget_primitives), registered when the cache is made.
inline std::atomic<uint64_t>& primitive_epoch() {
  static std::atomic<uint64_t> epoch{1};
  return epoch;
}
using Forget = void (*)(uint64_t made_since, uint64_t used_since);
void register_cache(Forget forget);

// The cache: every primitive by the numbers that define it, with the epochs it was made and last
// asked for in. Made once: a thread that finds the key missing makes it under making(), after
// looking again (another may have made it meanwhile).
using Key = std::vector<int64_t>;
template <typename T>
struct Cache {
  struct Entry {
    std::shared_ptr<const T> primitive;  // null where the kind has none for this key
    uint64_t made = 0, used = 0;
  };
  std::mutex mutex;
  std::map<std::pair<std::string, Key>, Entry> table;

  static Cache& get() {
    static Cache* cache = [] {
      auto* c = new Cache();  // never destroyed: primitives may be asked for at exit
      register_cache([](uint64_t made_since, uint64_t used_since) {
        Cache& self = get();
        std::lock_guard<std::mutex> lock(self.mutex);
        for (auto it = self.table.begin(); it != self.table.end();) {
          const Entry& e = it->second;
          it = e.made >= made_since && e.used < used_since ? self.table.erase(it) : std::next(it);
        }
      });
      return c;
    }();
    return *cache;
  }
};

template <typename T, typename Make>
std::shared_ptr<const T> cached(const char* kind, Key key, Make make) {
  Cache<T>& cache = Cache<T>::get();
  auto k = std::make_pair(std::string(kind), std::move(key));
  // The entry for k, marked used now; nothing when there is none (a census may drop it after).
  auto find = [&]() -> std::optional<std::shared_ptr<const T>> {
    std::lock_guard<std::mutex> lock(cache.mutex);
    const auto it = cache.table.find(k);
    if (it == cache.table.end()) return std::nullopt;
    it->second.used = primitive_epoch().load(std::memory_order_relaxed);
    return it->second.primitive;
  };
  if (auto found = find()) return *found;
  std::lock_guard<std::recursive_mutex> one_maker(making());
  if (auto found = find()) return *found;
  std::shared_ptr<const T> made;
  try {
    made = make();
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("memoplan: oneDNN cannot make this ") + kind + ": " +
                             e.what());
  }
  const uint64_t now = primitive_epoch().load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.table.emplace(std::move(k), typename Cache<T>::Entry{made, now, now})
      .first->second.primitive;
}

inline void append(Key& key, const std::vector<PostOp>& post) {
  for (const PostOp& op : post) {
    key.push_back(op.kind);
    key.push_back(static_cast<int64_t>(op.alpha * 1e6f));
    key.push_back(static_cast<int64_t>(op.beta * 1e6f));
  }
}

}  // namespace memoplan::onednn::detail

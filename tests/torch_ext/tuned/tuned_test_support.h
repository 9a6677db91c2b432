// What the tuned-kernel tests share: comparing with aten's results, forcing a kernel choice for
// one test, and the plan options that turn the tuned kernels on.
#pragma once

#include <ATen/ATen.h>
#include <torch/script.h>

#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "memoplan/onednn/onednn.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_ops.h"

namespace memoplan::torch_ext::testing {

// A field of /proc/self/status ("VmRSS:", "VmHWM:") in bytes; -1 when unreadable.
inline int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  }
  return -1;
}

// One and two intra-op threads; one only under ThreadSanitizer: aten's own OpenMP regions
// (libgomp is not instrumented) show as races there.
inline std::vector<int> thread_counts() {
#if defined(__SANITIZE_THREAD__)
  return {1};
#else
  return {1, 2};
#endif
}

// What the CPU itself reports (cpuid, through the compiler's builtins), not what memoplan chose:
// tests of the tuned path skip only on what the CPU lacks, so a regression that switched a path off
// fails instead of skipping. The blocked layout (oneDNN) and both Winograds need AVX2 + FMA.
inline bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Why oneDNN's kernels (the blocked layout, oneDNN's matmul) cannot run here, "" where they can:
// the CPU lacks AVX2 + FMA, or oneDNN fails memoplan's self-check on it (onednn.h: memoplan turns
// them off there by design; the CI's Debian 13 stage on a Zen 4 VM). The check's own verdict, not
// block_size(): a regression that switched the kernels off still fails.
inline const std::string& onednn_off_here() {
  static const std::string why = [] {
    if (!cpu_has_avx2_fma()) return std::string("no AVX2 + FMA on this CPU");
    const std::string failure = onednn::self_check();
    return failure.empty() ? failure : "oneDNN fails memoplan's self-check on this CPU: " + failure;
  }();
  return why;
}

// Whether two contiguous tensors hold the same bytes (memory min's ops promise aten's bytes).
inline bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// max |got - want| / max |want|: the tolerance the tuned ops promise (1e-5).
inline double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs().max() / want.abs().max()).item<double>();
}

// The kernel options (kernels.h) as the scope changes them with set(), restored at its end.
class OptionsGuard {
 public:
  OptionsGuard() : was_(kernel_options()) {}
  ~OptionsGuard() { set_kernel_options(was_); }
  OptionsGuard(const OptionsGuard&) = delete;
  OptionsGuard& operator=(const OptionsGuard&) = delete;

  template <typename Change>
  void set(const Change& change) {
    KernelOptions options = kernel_options();
    change(options);
    set_kernel_options(options);
  }

 private:
  KernelOptions was_;
};

// Forces a kernel choice until the end of the scope.
struct ChoiceGuard : OptionsGuard {
  explicit ChoiceGuard(KernelChoice c) {
    set([c](KernelOptions& o) { o.choice = c; });
  }
};

// Turns the blocked layout on or off for the graphs planned in the scope.
struct BlockedLayoutGuard : OptionsGuard {
  explicit BlockedLayoutGuard(bool on) {
    set([on](KernelOptions& o) { o.blocked_layout = on; });
  }
};

inline PlanOptions tuned() {
  PlanOptions o;
  o.kernels = Kernels::kTuned;
  return o;
}

// How many nodes of `kind` the graph holds, in its blocks too (a planned forward's body is the
// flat executor's branch: planning/flat_executor.h).
inline int count_in_blocks(const torch::jit::Block* block, const char* kind) {
  int n = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    n += node->kind() == c10::Symbol::fromQualString(kind);
    for (const torch::jit::Block* inner : node->blocks()) n += count_in_blocks(inner, kind);
  }
  return n;
}
inline int count_in_forward(const torch::jit::Module& m, const char* kind) {
  return count_in_blocks(m.get_method("forward").graph()->block(), kind);
}

// One fused encoder layer (what nn.TransformerEncoderLayer runs in inference), e = 64, 4 heads.
inline torch::jit::Module encoder(bool gelu, bool norm_first) {
  torch::manual_seed(1);
  torch::jit::Module m("Encoder");
  const int64_t e = 64, f = 96;
  for (auto [name, shape] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"qkv_w", {3 * e, e}},
                                                                 {"qkv_b", {3 * e}},
                                                                 {"proj_w", {e, e}},
                                                                 {"proj_b", {e}},
                                                                 {"n1_w", {e}},
                                                                 {"n1_b", {e}},
                                                                 {"n2_w", {e}},
                                                                 {"n2_b", {e}},
                                                                 {"f1_w", {f, e}},
                                                                 {"f1_b", {f}},
                                                                 {"f2_w", {e, f}},
                                                                 {"f2_b", {e}}}) {
    m.register_parameter(name, torch::randn(shape) * 0.2, false);
  }
  m.register_attribute("gelu", c10::BoolType::get(), gelu);
  m.register_attribute("norm_first", c10::BoolType::get(), norm_first);
  m.define(R"(
    def forward(self, x, mask: Optional[Tensor] = None, mask_type: Optional[int] = None):
        return torch._transformer_encoder_layer_fwd(x, 64, 4, self.qkv_w, self.qkv_b, self.proj_w,
            self.proj_b, self.gelu, self.norm_first, 1e-5, self.n1_w, self.n1_b, self.n2_w,
            self.n2_b, self.f1_w, self.f1_b, self.f2_w, self.f2_b, mask, mask_type)
  )");
  m.eval();
  return m;
}

}  // namespace memoplan::torch_ext::testing

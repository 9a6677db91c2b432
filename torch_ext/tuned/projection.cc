// tuned::project: a product with a packed weight (a linear layer, an encoder layer's projections)
// on memoplan's GEMM or on oneDNN's matmul (its brgemm kernels: on the AVX-512 Xeon 1.2-1.5x
// memoplan's GEMM on BERT's shapes), whichever measured faster for the shape and epilogue. Each
// new shape is measured once, on its first call (during plan()'s warm-up): memoplan's best
// configuration (best_config) and oneDNN's primitive, each with its weight packed for the
// measurement only, interleaved on the call's own operands into a scratch output. The winner's
// packing is then kept at the weight's site; the loser's is never made. KernelOptions::gemm
// (kernels.h) kMemoplan or kOneDnn skips the measurement (oneDNN where it takes the shape);
// KernelChoice::kAlwaysMemoplan runs memoplan's GEMM with its default configuration (oneDNN's with
// GemmSide::kOneDnn), as everywhere.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sstream>
#include <string>
#include <tuple>

#include "cold_caches.h"
#include "memoplan/kernels/gemm.h"
#include "memoplan/kernels/tune.h"
#include "memoplan/onednn/onednn.h"
#include "planning/choice_cache.h"
#include "planning/planning.h"
#include "reports.h"
#include "tuned_support.h"

namespace memoplan::torch_ext::tuned {
namespace {

using kernels::Activation;

// M, K, N, lda, ldc, activation, bias, accumulate, intra-op threads.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, bool, int>;
struct Choice {
  bool onednn = false;
  bool gemv = false;           // kernels::gemv on the plain weight (a few rows, measured cold)
  kernels::GemmConfig config;  // memoplan's side
  std::shared_ptr<const onednn::Matmul> matmul;  // oneDNN's side, where it takes the shape
  double memoplan_ms = 0, onednn_ms = 0;         // 0: not measured
  double gemv_ms = 0, packed_cold_ms = 0;        // cold: the gemv and the packed side's winner
  std::string note;                              // why oneDNN is not a candidate, if it is not
};
ChoiceCache<Key, Choice>& projection_choices() {
  static auto* table = new ChoiceCache<Key, Choice>();
  return *table;
}

onednn::MatmulSpec spec_of(const Key& key) {
  const auto& [m, k, n, lda, ldc, activation, bias, accumulate, threads] = key;
  onednn::MatmulSpec spec{m, k, n, lda, ldc, bias, {}};
  if (accumulate) spec.post.push_back({onednn::kResidualSum});  // added before the activation
  if (activation == static_cast<int>(Activation::kRelu)) {
    spec.post.push_back({static_cast<int>(onednn::Eltwise::kRelu)});
  } else if (activation == static_cast<int>(Activation::kGelu)) {
    spec.post.push_back({static_cast<int>(onednn::Eltwise::kGelu)});
  } else if (activation == static_cast<int>(Activation::kHardswish)) {
    spec.post.push_back({static_cast<int>(onednn::Eltwise::kHardswish)});
  }
  return spec;
}

kernels::Epilogue epilogue_of(const float* bias, Activation activation, bool accumulate) {
  kernels::Epilogue e{bias, activation};
  e.accumulate = accumulate;
  return e;
}

kernels::MatrixView weight_transposed(const at::Tensor& w) {
  return kernels::MatrixView{w.data_ptr<float>(), w.size(0), w.size(1), w.stride(0), w.stride(1)}
      .transposed();
}

kernels::MatrixView rows(const at::Tensor& x2d) {
  return {x2d.data_ptr<float>(), x2d.size(0), x2d.size(1), x2d.stride(0), 1};
}

void run_onednn(const onednn::Matmul& matmul, const at::Tensor& x2d, const void* packed,
                const float* bias, float* out) {
  const auto bytes = static_cast<int64_t>(matmul.scratchpad_bytes());
  const at::Tensor scratch = bytes > 0 ? at::empty({bytes}, x2d.options().dtype(at::kByte))
                                       : at::Tensor();  // planned like any temporary
  matmul.run(x2d.data_ptr<float>(), packed, bias, out,
             scratch.defined() ? scratch.data_ptr() : nullptr);
}

// The choice for a new shape. Under a forced kernel choice (tests: kAlwaysMemoplan) nothing is
// measured: memoplan's GEMM with its default configuration, or oneDNN's with GemmSide::kOneDnn.
Choice measure_packed(const Key& key, const at::Tensor& x2d, const at::Tensor& w,
                      const float* bias) {
  const auto& [m, k, n, lda, ldc, activation, has_bias, accumulate, threads] = key;
  Choice c;
  const auto act = static_cast<Activation>(activation);
  const GemmSide f = kernel_options().gemm;
  const bool measuring = choice() == KernelChoice::kMeasure;
  c.config = measuring && f != GemmSide::kOneDnn ? best_config(m, k, n, act, has_bias, true)
                                                 : kernels::default_config();
  if (!measuring && f != GemmSide::kOneDnn) return c;
  if (onednn::block_size() == 0) {
    c.note = onednn::describe();  // no oneDNN kernels for this CPU, or none right
    return c;
  }
  try {
    c.matmul = onednn::matmul(spec_of(key));
  } catch (const std::exception& e) {
    c.note = e.what();
    return c;
  }
  if (!measuring || f != GemmSide::kMeasure) {
    c.onednn = f == GemmSide::kOneDnn;
    c.note = "GemmSide";
    return c;
  }
  // Each side's packing for the measurement only, on a zeroed scratch output (accumulate adds to
  // it). None of it is the pass's: a profiled pass (a new shape's) must not count it. Both
  // packings at once (interleaved timing) only within kMeasureScratchBytes: above it each side is
  // timed alone (the fastest of an untimed and 5 timed calls), its packing dropped before the
  // other's is made. vgg16's 25088 x 4096 classifier (392 MiB) held both beside its plain pages:
  // the tuned copy's peak was 2x stock's.
  runtime_pass::Unrecorded beside_the_pass;
  const at::Tensor scratch_out = at::zeros({m, ldc}, x2d.options());
  float* out = scratch_out.data_ptr<float>();
  const kernels::Epilogue epilogue = epilogue_of(bias, act, accumulate);
  auto panels = [&] { return kernels::PackedB(weight_transposed(w), c.config.kernel.nr); };
  auto packed = [&] {
    at::Tensor bytes =
        at::empty({static_cast<int64_t>(c.matmul->packed_weights_bytes())}, at::kByte);
    c.matmul->pack_weights(w.data_ptr<float>(), w.stride(0), w.stride(1), bytes.data_ptr());
    return bytes;
  };
  auto on_memoplan = [&](const kernels::PackedB& p) {
    kernels::gemm(rows(x2d), p, out, ldc, epilogue, c.config, intra_op_parallel());
  };
  auto on_onednn = [&](const at::Tensor& p) {
    run_onednn(*c.matmul, x2d, p.data_ptr(), bias, out);
  };
  const size_t panel_bytes = kernels::PackedB::bytes_for(k, n, c.config.kernel.nr);
  if (panel_bytes + c.matmul->packed_weights_bytes() <= kernels::kMeasureScratchBytes) {
    const kernels::PackedB p = panels();
    const at::Tensor q = packed();
    const Timing t = time_both([&] { on_memoplan(p); }, [&] { on_onednn(q); }, 5);
    c.memoplan_ms = t.memoplan_ms;
    c.onednn_ms = t.aten_ms;
  } else {
    {
      const kernels::PackedB p = panels();
      c.memoplan_ms = fastest_ms([&] { on_memoplan(p); }, 5);
    }
    const at::Tensor q = packed();
    c.onednn_ms = fastest_ms([&] { on_onednn(q); }, 5);
  }
  c.onednn = c.onednn_ms < c.memoplan_ms;
  return c;
}

kernels::MatrixView plain_rows(const at::Tensor& w) {
  return {w.data_ptr<float>(), w.size(0), w.size(1), w.stride(0), 1};
}

// A few rows (a classifier at batch 1 or 2): the product streams its weight from memory in a
// pass (the layers before evicted it; mobilenet_v3_large's 10 MB classifier), so the packed
// side's winner and kernels::gemv on the plain rows are timed cold, the weight's forms flushed
// before each call. gemv serves the shape only when it is faster cold; then no packing is kept.
Choice measure(const Key& key, const at::Tensor& x2d, const at::Tensor& w, const float* bias) {
  Choice c = measure_packed(key, x2d, w, bias);
  const auto& [m, k, n, lda, ldc, activation, has_bias, accumulate, threads] = key;
  if (choice() != KernelChoice::kMeasure || kernel_options().gemm != GemmSide::kMeasure ||
      m > kernels::kGemvMaxRows || w.stride(1) != 1 || x2d.stride(1) != 1) {
    return c;
  }
  runtime_pass::Unrecorded beside_the_pass;
  const at::Tensor scratch_out = at::zeros({m, ldc}, x2d.options());
  float* out = scratch_out.data_ptr<float>();
  const kernels::Epilogue epilogue =
      epilogue_of(bias, static_cast<Activation>(activation), accumulate);
  auto gemv = [&] {
    kernels::gemv(rows(x2d), plain_rows(w), out, ldc, epilogue, intra_op_parallel());
  };
  Timing t{};
  if (c.onednn) {
    at::Tensor q = at::empty({static_cast<int64_t>(c.matmul->packed_weights_bytes())}, at::kByte);
    c.matmul->pack_weights(w.data_ptr<float>(), w.stride(0), w.stride(1), q.data_ptr());
    t = time_both(
        gemv, [&] { run_onednn(*c.matmul, x2d, q.data_ptr(), bias, out); }, 5,
        [&] {
          flush_tensor(w);
          flush_tensor(q);
        });
  } else {
    const kernels::PackedB p(weight_transposed(w), c.config.kernel.nr);
    t = time_both(
        gemv,
        [&] { kernels::gemm(rows(x2d), p, out, ldc, epilogue, c.config, intra_op_parallel()); }, 5,
        [&] {
          flush_tensor(w);
          if (!p.empty()) flush_from_caches(p.panel(0), p.bytes());
        });
  }
  c.gemv_ms = t.memoplan_ms;
  c.packed_cold_ms = t.aten_ms;
  c.gemv = c.gemv_ms < c.packed_cold_ms;
  return c;
}

}  // namespace

void project(const at::Tensor& x2d, const at::Tensor& w, const float* bias, int64_t site,
             float* out, int64_t ldc, Activation activation, bool accumulate, int64_t version) {
  const Key key{x2d.size(0),     x2d.size(1), w.size(0),
                x2d.stride(0),   ldc,         static_cast<int>(activation),
                bias != nullptr, accumulate,  at::get_num_threads()};
  Choice uncached;  // under a forced kernel choice (tests): nothing measured, nothing cached
  const Choice* chosen = &uncached;
  if (choice() != KernelChoice::kMeasure) {
    uncached = measure(key, x2d, w, bias);
  } else {
    chosen = &projection_choices().decide(key, [&] { return measure(key, x2d, w, bias); });
  }
  const Choice& c = *chosen;
  const kernels::Epilogue epilogue = epilogue_of(bias, activation, accumulate);
  // The key holds no weight strides: a shape measured on a linear's weight may come again on a
  // transposed one (memoplan::matmul's x @ W), which takes the packed side measured with it.
  if (c.gemv && w.stride(1) == 1) {
    kernels::gemv(rows(x2d), plain_rows(w), out, ldc, epilogue, intra_op_parallel());
    return;
  }
  if (c.onednn) {
    const auto packed = onednn_weight(site, w, c.matmul, version);
    run_onednn(*c.matmul, x2d, packed->bytes.data_ptr(), bias, out);
    return;
  }
  const auto packed = packed_weight(site, w, c.config.kernel.nr, version);
  kernels::gemm(rows(x2d), packed->panels, out, ldc, epilogue, c.config, intra_op_parallel());
}

std::string projection_report() {
  std::ostringstream out;
  projection_choices().for_each([&](const Key& key, const Choice& c) {
    const auto& [m, k, n, lda, ldc, activation, bias, accumulate, threads] = key;
    out << "product " << m << "x" << k << "x" << n << " "
        << to_string(static_cast<Activation>(activation)) << (bias ? " +bias" : "")
        << (accumulate ? " +out" : "") << " threads " << threads << ": memoplan " << c.memoplan_ms
        << " ms (" << c.config.to_string() << "), oneDNN ";
    if (c.matmul) {
      out << c.onednn_ms << " ms (" << c.matmul->implementation() << ")";
    } else {
      out << "none";
    }
    if (!c.note.empty()) out << " [" << c.note << "]";
    if (c.gemv_ms > 0) {
      out << "; cold: gemv " << c.gemv_ms << " ms, " << (c.onednn ? "oneDNN " : "memoplan ")
          << c.packed_cold_ms << " ms";
    }
    out << " -> " << (c.gemv ? "gemv" : c.onednn ? "oneDNN" : "memoplan") << "\n";
  });
  return out.str();
}

namespace {
const bool projection_report_registered =
    add_report(20, &projection_report);  // kernel_report()'s order
}  // namespace

}  // namespace memoplan::torch_ext::tuned

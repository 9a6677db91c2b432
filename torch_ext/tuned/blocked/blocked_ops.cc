// The convolution of a blocked-layout region (blocked.h): batch norm folded in, its epilogue
// fused (activations, a residual addition), on oneDNN in whichever layout its input has
// (blocked_tensor.h), the result in its input's layout or the one asked for; and its per-layout
// measurement. What is not oneDNN's runs as aten would, through plain tensors, and is converted
// back: a batch norm in training mode, autograd, a dtype other than float. The result is the same
// either way. The region's other ops: simple_ops.cc; the TorchScript operators that call these:
// blocked_operators.cc.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>

#include "blocked.h"
#include "blocked_tensor.h"
#include "budget/released_weights.h"
#include "memoplan/onednn/onednn.h"
#include "planning/planning.h"
#include "resolved_calls.h"
#include "tuned/conv_weights.h"
#include "tuned/layout_plan.h"
#include "tuned/tuned_support.h"
#include "tuned/weight_cache.h"
#include "winograd_conv.h"

namespace memoplan::torch_ext::blocked {

using onednn::Format;
using onednn::PostOp;
using onednn::Shape;

namespace {

// The call's spec but its post-ops (what a resolved call compares besides them: no copy of them).
onednn::ConvSpec geometry_spec(const at::Tensor& x, const ConvArgs& a, Format in, Format out) {
  onednn::ConvSpec spec;
  spec.n = x.size(0);
  spec.c = x.size(1);
  spec.h = x.size(2);
  spec.w = x.size(3);
  spec.out_channels = a.weight.size(0);
  spec.kh = a.weight.size(2);
  spec.kw = a.weight.size(3);
  spec.groups = a.groups;
  for (int i = 0; i < 2; ++i) {
    spec.stride[i] = a.stride.at(a.stride.size() == 1 ? 0 : i);
    spec.padding[i] = a.padding.at(a.padding.size() == 1 ? 0 : i);
    spec.dilation[i] = a.dilation.at(a.dilation.size() == 1 ? 0 : i);
  }
  spec.input = in;
  spec.output = out;
  return spec;
}

onednn::ConvSpec spec_of(const at::Tensor& x, const ConvArgs& a, Format in, Format out) {
  onednn::ConvSpec spec = geometry_spec(x, a, in, out);
  spec.post.assign(a.post.begin(), a.post.end());
  return spec;
}

// The convolution for this (input, output) layout pair at `site`, or null where oneDNN has none
// but its reference loop (far slower than aten's convolution). A Winograd form is weighed against
// the weights of the site's module (winograd_conv.h).
std::shared_ptr<const onednn::Conv> primitive_for(const onednn::ConvSpec& spec, int64_t site) {
  std::shared_ptr<const onednn::Conv> p;
  try {
    p = best_conv(spec, winograd_price(tuned::site_module(site)));
  } catch (const std::exception&) {
    return nullptr;
  }
  return p->implementation().rfind("ref", 0) == 0 ? nullptr : p;
}

// The packed weights of one convolution site: per preparation (its generation, the source), one
// packing per weight layout the site's primitives read (usually one for all input shapes); and a
// zero bias where the convolution has none.
struct Packing {
  std::shared_ptr<const onednn::Conv> packer;
  at::Tensor bytes;
};
tuned::WeightCache<Packing>& packings() {
  static auto* cache = new tuned::WeightCache<Packing>(
      [](const Packing& p) -> uint64_t { return p.bytes.nbytes(); });
  return *cache;
}
tuned::WeightCache<at::Tensor>& zero_biases() {
  static auto* cache = new tuned::WeightCache<at::Tensor>(
      [](const at::Tensor& t) -> uint64_t { return t.nbytes(); });
  return *cache;
}

// A site's packed weight and bias, with what owns each (a cache's form; null for a packing made
// for one call): resolved calls keep the owners weakly.
struct Packed {
  at::Tensor weights, bias;
  std::shared_ptr<const void> weights_owner, bias_owner;
};

// Whether `residual` (converted from `operand`, or `operand` itself) is seen by nobody else: the
// interpreter moved its last use into this call, no other tensor shares its storage. Then the
// convolution may write its output over it.
bool sole_owner(const at::Tensor& residual, const at::Tensor& operand) {
  const size_t ours = residual.is_same(operand) ? 2 : 1;
  return residual.use_count() == ours && residual.storage().use_count() == 1;
}
// Packs `w`'s weight for `packer` into `packed`, the batch norm folded in as it packs where the
// packer can (else into a folded copy first), in slices where it can: each slice's plain rows
// go back once packed (released_weights.h).
void pack(const onednn::Conv& packer, const conv::Weights& w, const ConvArgs& a, void* packed) {
  const conv::BatchNorm* bn = a.batch_norm ? &*a.batch_norm : nullptr;
  const conv::PackingSource source = conv::packing_source(w, a.weight, bn);
  const float* scales = source.scales.defined() ? source.scales.data_ptr<float>() : nullptr;
  const auto* rows = static_cast<const float*>(source.weight.data_ptr());
  const int64_t per_row = source.weight.numel() / std::max<int64_t>(1, source.weight.size(0));
  const auto give_back = [&](int64_t first, int64_t count) {
    budget::give_back_plain_range(rows + first * per_row,
                                  static_cast<size_t>(count * per_row) * sizeof(float));
  };
  if (!packer.pack_weights(rows, packed, scales, give_back)) {
    const at::Tensor folded = conv::folded_weight(w, a.weight, bn);
    packer.pack_weights(folded.data_ptr<float>(), packed, nullptr, {});
  }
}

Packed packed_for(int64_t site, const std::shared_ptr<const conv::Weights>& prepared,
                  const ConvArgs& a, const std::shared_ptr<const onednn::Conv>& primitive) {
  const conv::Weights& w = *prepared;
  tuned::Sources sources;
  sources.add(at::Tensor(), w.generation);  // the preparation: folded weights never change
  Packed packed;
  if (w.bias) {
    packed.bias = *w.bias;
    packed.bias_owner = prepared;
  } else {
    auto zeros = zero_biases().get(
        site, sources, [](const at::Tensor&) { return true; },
        [&] { return std::make_shared<at::Tensor>(at::zeros({a.weight.size(0)}, at::kFloat)); });
    packed.bias = *zeros;
    packed.bias_owner = std::move(zeros);
  }
  auto make = [&] {
    // The batch norm folded in as it packs, no folded copy; the plain weight's pages go slice by
    // slice as they are packed (pack()), the rest once it is made (WeightCache::get).
    auto fresh = std::make_shared<Packing>();
    fresh->packer = primitive;
    fresh->bytes = at::empty({static_cast<int64_t>(primitive->packed_weights_bytes())},
                             at::TensorOptions().dtype(at::kByte));
    pack(*primitive, w, a, fresh->bytes.data_ptr());
    return fresh;
  };
  if (a.transient_packing) {
    {
      runtime_pass::OffPlan off_plan;
      packed.weights = make()->bytes;
    }
    budget::give_back_plain_weights();  // what the packing read (released_weights.h)
    return packed;
  }
  auto packing = packings().get(
      site, sources, [&](const Packing& p) { return p.packer->same_packing(*primitive); }, make);
  packed.weights = packing->bytes;
  packed.weights_owner = std::move(packing);
  return packed;
}

}  // namespace

// Whether oneDNN may run the convolution (else aten does: training, autograd, other dtypes).
bool onednn_may_run(const at::Tensor& x, const ConvArgs& a) {
  const bool autograd =
      at::GradMode::is_enabled() &&
      (x.requires_grad() || a.weight.requires_grad() || (a.bias && a.bias->requires_grad()));
  return !a.batch_norm_training && !autograd && a.weight.scalar_type() == at::kFloat &&
         (!a.bias || a.bias->scalar_type() == at::kFloat) && a.weight.dim() == 4 && x.dim() == 4 &&
         x.scalar_type() == at::kFloat && x.device().is_cpu();
}

namespace {

// aten's convolution and batch norm on plain tensors, then the epilogue: where oneDNN may not run
// the call or has only its reference loop for it.
at::Tensor on_aten(const at::Tensor& x_in, const ConvArgs& a) {
  tuned::count(false);
  at::Tensor y = at::conv2d(is_blocked(x_in) ? to_plain(x_in) : x_in, a.weight, a.bias, a.stride,
                            a.padding, a.dilation, a.groups);
  if (a.batch_norm) {
    const conv::BatchNorm& bn = *a.batch_norm;
    y = at::batch_norm(y, bn.weight, bn.bias, bn.mean, bn.var, a.batch_norm_training,
                       a.batch_norm_momentum, bn.eps, false);
  }
  for (const PostOp& op : a.post) {
    y = op.kind == onednn::kResidualAdd ? y + to_plain(*a.residual) : apply_eltwise(y, op);
  }
  return convert(y, a.output);
}

void check_residual(const at::Tensor& residual, const onednn::Conv& primitive,
                    const at::Tensor& operand) {
  const Shape r = shape_of(residual), o = primitive.output();
  TORCH_CHECK(r.n == o.n && r.c == o.c && r.h == o.h && r.w == o.w,
              "memoplan::bconv: residual of sizes ", operand.sizes(),
              " does not match the convolution's output");
}

}  // namespace

at::Tensor conv(const at::Tensor& x_in, const ConvArgs& a) {
  if (!onednn_may_run(x_in, a)) return on_aten(x_in, a);
  at::internal::lazy_init_num_threads();
  at::Tensor x = dense(x_in, "bconv");
  onednn::ConvSpec spec = geometry_spec(x, a, format_of(x), a.output);
  const conv::BatchNorm* bn = a.batch_norm ? &*a.batch_norm : nullptr;
  const tuned::Sources sources = conv::weight_sources(a.weight, a.bias, bn);
  ResolvedTable* table = a.transient_packing ? nullptr : resolved_calls();
  Resolution r;
  Packed packed;  // a slow call's (a packing made for this call alone lives here)
  at::Tensor residual;
  bool sole = false;  // the residual may be written over
  const Resolved* known = resolved_for(table, a.site, spec, a.post, sources);
  if (known) {  // its primitive exists: the residual is converted, as below
    if (a.residual) {
      residual = convert(*a.residual, a.output);
      sole = sole_owner(residual, *a.residual);
    }
    if (!take(*known, sole, r)) known = nullptr;
  }
  if (!known) {
    spec.post.assign(a.post.begin(), a.post.end());
    r.primitive = primitive_for(spec, a.site);
    bool keepable = true;
    if (!r.primitive && format_of(x) == Format::kNhwc) {  // oneDNN's few-channel kernels: NCHW
      x = x.contiguous();
      r.primitive = primitive_for(spec_of(x, a, Format::kNchw, a.output), a.site);
      keepable = false;
    }
    if (!r.primitive) return on_aten(x_in, a);
    if (a.residual) {
      if (!residual.defined()) {
        residual = convert(*a.residual, a.output);
        sole = sole_owner(residual, *a.residual);
      }
      check_residual(residual, *r.primitive, *a.residual);
      // Written over: oneDNN's sum adds it as it stores, where the binary addition reads it as a
      // second stream. Not over memoplan's Winograd, which has no sum.
      if (sole && r.primitive->implementation().rfind("memoplan:", 0) != 0) {
        onednn::ConvSpec summing = spec_of(x, a, format_of(x), a.output);
        for (PostOp& op : summing.post) {
          if (op.kind == onednn::kResidualAdd) op.kind = onednn::kResidualSum;
        }
        if (auto p = primitive_for(summing, a.site)) {
          r.primitive = std::move(p);
          r.in_place = true;
        }
      }
    }
    const conv::Geometry geometry{a.stride, a.padding, a.dilation, a.groups};
    const auto prepared =
        conv::weights(a.site, a.weight, a.bias, bn, geometry, conv::Keep::kPackingsOnly);
    packed = packed_for(a.site, prepared, a, r.primitive);  // alive until the call returns
    r.weights = packed.weights.data_ptr();
    r.bias = packed.bias.data_ptr<float>();
    r.weights_owner = packed.weights_owner;
    r.bias_owner = packed.bias_owner;
    if (keepable) keep(table, a.site, spec, sources, sole, r);
  } else {
    if (a.residual) check_residual(residual, *r.primitive, *a.residual);
  }
  at::Tensor out = r.in_place ? residual : new_tensor(r.primitive->output(), a.output, x.options());
  at::Tensor scratch = scratchpad(r.primitive->scratchpad_bytes(), x.options());
  r.primitive->run(x.data_ptr<float>(), r.weights, r.bias,
                   residual.defined() && !r.in_place ? residual.data_ptr<float>() : nullptr,
                   out.data_ptr<float>(), data_or_null(scratch));
  tuned::count(true);
  tuned::count_convolution(known != nullptr);
  if (r.in_place) tuned::count_in_place();
  return out;
}

layouts::ConvCosts measure(const at::Tensor& x_in, const ConvArgs& a) {
  constexpr int kF = onednn::kFormats;
  // The primitives made here (every layout pair's, Winograd's candidates, the conversions') leave
  // oneDNN's caches when the measurement ends, their JIT code with them: the pass makes again the
  // one it runs. Kept, mobilenet_v2's 240 unused of 275 convolutions held 10 MiB of heap.
  struct ForgetMade {
    const uint64_t since = onednn::next_primitive_epoch();
    ~ForgetMade() { onednn::forget_primitives(since, std::numeric_limits<uint64_t>::max()); }
  } forget_made;
  layouts::ConvCosts costs;
  const at::Tensor x = dense(x_in, "bconv");
  if (x.numel() == 0) return costs;  // nothing to weigh: every pair free
  const conv::Geometry geometry{a.stride, a.padding, a.dilation, a.groups};
  const auto prepared =
      conv::weights(a.site, a.weight, a.bias, a.batch_norm ? &*a.batch_norm : nullptr, geometry,
                    conv::Keep::kPackingsOnly);
  runtime_pass::OffPlan off_plan;  // synthetic operands, not the pass's tensors
  struct GiveBack {  // the plain weight's pages the packings read (released_weights.h)
    ~GiveBack() { budget::give_back_plain_weights(); }
  } give_back;
  const at::Tensor bias =
      prepared->bias ? *prepared->bias : at::zeros({a.weight.size(0)}, at::kFloat);
  std::ostringstream summary;
  summary << x.size(1) << "x" << x.size(2) << "x" << x.size(3) << " -> " << a.weight.size(0) << " "
          << a.weight.size(2) << "x" << a.weight.size(3) << " /" << a.groups << ":";
  // The primitive of each (input, output) pair oneDNN has one for, with its operands; then, per
  // weight layout, the candidates that read it timed in interleaved rounds (an untimed call each
  // first), the fastest round of each. One packing alive at a time: a 512 -> 512 3x3 held up to
  // three 9 MiB packings at once beside its plain weight.
  struct Candidate {
    int in = 0, out = 0;
    std::shared_ptr<const onednn::Conv> primitive;
    at::Tensor packed, y, residual, scratch;
    double ms = 1e300;
  };
  std::vector<Candidate> candidates;
  std::vector<at::Tensor> inputs(kF), outputs(kF), residuals(kF);
  size_t scratch_bytes = 0;
  Shape out_shape{};
  for (int in = 0; in < kF; ++in) {
    for (int out = 0; out < kF; ++out) {
      const auto primitive =
          primitive_for(spec_of(x, a, static_cast<Format>(in), static_cast<Format>(out)), a.site);
      if (!primitive) continue;
      if (!inputs[in].defined()) inputs[in] = convert(x, static_cast<Format>(in));
      Candidate c;
      c.in = in;
      c.out = out;
      c.primitive = primitive;
      out_shape = primitive->output();
      // The candidates run one at a time: those writing one layout share its output (and its
      // residual), all of them one scratchpad (mobilenet_v2's 112x112 layers held nine outputs).
      if (!outputs[out].defined()) {
        outputs[out] = new_tensor(out_shape, static_cast<Format>(out), x.options());
        if (a.residual) {
          residuals[out] = new_tensor(out_shape, static_cast<Format>(out), x.options()).zero_();
        }
      }
      c.y = outputs[out];
      c.residual = residuals[out];
      scratch_bytes = std::max(scratch_bytes, primitive->scratchpad_bytes());
      candidates.push_back(std::move(c));
    }
  }
  const at::Tensor scratch = scratchpad(scratch_bytes, x.options());
  for (Candidate& c : candidates) c.scratch = scratch;
  auto run = [&](const Candidate& c) {
    c.primitive->run(inputs[c.in].data_ptr<float>(), c.packed.data_ptr(), bias.data_ptr<float>(),
                     c.residual.defined() ? c.residual.data_ptr<float>() : nullptr,
                     c.y.data_ptr<float>(), data_or_null(c.scratch));
  };
  // Packed here, not at the site: the site keeps the packings the passes use.
  std::vector<bool> timed(candidates.size(), false);
  for (size_t first = 0; first < candidates.size(); ++first) {
    if (timed[first]) continue;
    std::vector<size_t> group;
    for (size_t i = first; i < candidates.size(); ++i) {
      if (!timed[i] && candidates[i].primitive->same_packing(*candidates[first].primitive)) {
        group.push_back(i);
        timed[i] = true;
      }
    }
    const std::shared_ptr<const onednn::Conv>& packer = candidates[first].primitive;
    at::Tensor packed =
        at::empty({static_cast<int64_t>(packer->packed_weights_bytes())}, at::kByte);
    pack(*packer, *prepared, a, packed.data_ptr());
    std::vector<std::function<void()>> calls;
    for (size_t i : group) {
      candidates[i].packed = packed;
      calls.push_back([&run, &c = candidates[i]] { run(c); });
    }
    const std::vector<double> ms = tuned::fastest_each(calls, 3);
    for (size_t k = 0; k < group.size(); ++k) {
      candidates[group[k]].ms = ms[k];
      candidates[group[k]].packed = at::Tensor();  // the packing goes with this group
    }
  }
  double direct[kF][kF];
  for (auto& row : direct) std::fill(std::begin(row), std::end(row), layouts::kForbidden);
  for (const Candidate& c : candidates) {
    direct[c.in][c.out] = c.ms;
    summary << " " << layouts::to_string(static_cast<layouts::Layout>(c.in)) << "->"
            << layouts::to_string(static_cast<layouts::Layout>(c.out)) << " " << c.ms;
  }
  // Conversions: the input's from its layout to each other one, per MiB, each into an output made
  // once (a planned pass takes a conversion's bytes from the slab; timing the allocation too
  // priced a 29 KiB conversion at 21 us, ten times its reorder, and kept shufflenet_v2's
  // convolutions on oneDNN's NCHW GEMM path at 2-10x their blocked time).
  double rate = 0;
  int rates = 0;
  for (int to = 0; to < kF; ++to) {
    if (static_cast<Format>(to) == format_of(x)) continue;
    const at::Tensor converted = new_tensor(shape_of(x), static_cast<Format>(to), x.options());
    rate += tuned::fastest_ms([&] { convert_into(converted, x); }, 3);
    ++rates;
  }
  const double mib_in = static_cast<double>(x.nbytes()) / (1 << 20);
  costs.convert_ms_per_mib = rate / rates / mib_in;
  const double mib_out =
      static_cast<double>(out_shape.n * out_shape.c * out_shape.h * out_shape.w) * 4 / (1 << 20);
  // Each (input, output) pair of the plan: the cheapest primitive, the input converted to what it
  // reads and its result to the planned layout where they differ.
  for (int in = 0; in < kF; ++in) {
    for (int out = 0; out < kF; ++out) {
      costs.ms[in][out] = layouts::kForbidden;
      for (int r = 0; r < kF; ++r) {
        for (int w = 0; w < kF; ++w) {
          if (direct[r][w] >= layouts::kForbidden) continue;
          const double ms = direct[r][w] + (r != in ? costs.convert_ms_per_mib * mib_in : 0.0) +
                            (w != out ? costs.convert_ms_per_mib * mib_out : 0.0);
          if (ms < costs.ms[in][out]) {
            costs.ms[in][out] = ms;
            costs.implementation[in][out] = r * kF + w;
          }
        }
      }
    }
  }
  summary << " ms; conversions " << costs.convert_ms_per_mib << " ms/MiB";
  costs.summary = summary.str();
  return costs;
}

}  // namespace memoplan::torch_ext::blocked

// memoplan::budget_conv2d and memoplan::budget_conv2d_min: aten::conv2d on a weight under a memory
// budget (put in place by budget/budget_graph.cc; the _min form by sliced_ops.cc's rewrite under
// memory = "min"). The convolution in slices of output channels, the weights of one slice
// resident at a time (the next one loading meanwhile, the last one dropped), each slice's input,
// weights and output laid out in the budgeted module's work arena instead of the slab. The output
// is the one tensor aten's convolution makes, whatever the slicing, so the activation plan does
// not change when the budget does. The first call decides, for its input's shape and thread
// count, how far the weight may be cut with the parts still computing aten's bytes (a random
// probe, every power of two of slices); a weight below kBudgetWeightBytes or smaller than the
// input, or a convolution whose single part already differs from aten's and that the BLAS's
// slices do not cover, runs unsliced: as aten's convolution (its temporaries planned in the slab
// as before), or as memoplan::conv2d_sliced under memory = "min".
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "budget_runtime.h"
#include "memoplan/onednn/onednn.h"
#include "memory_min/blas_bands.h"
#include "memory_min/sliced_conv.h"
#include "memory_min/sliced_operators.h"
#include "planning/planning.h"

namespace memoplan::torch_ext {
namespace {

constexpr int64_t kBudgetWeightBytes = 512 << 10;
constexpr uint32_t kBudgetMostSlices = 64;

// A part buffer's place in the work arena: each one page-aligned.
struct ArenaLayout {
  size_t input = 0, weights = 0, output = 0, scratchpad = 0, total = 0;
};
ArenaLayout arena_layout(const onednn::SlicedConv::Buffers& b) {
  const auto pages = [](size_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  ArenaLayout l;
  l.input = 0;
  l.weights = l.input + pages(b.input);
  l.output = l.weights + pages(b.weights);
  l.scratchpad = l.output + pages(b.output);
  l.total = l.scratchpad + pages(b.scratchpad);
  return l;
}

onednn::SlicedConvSpec in_slices(onednn::SlicedConvSpec spec, uint32_t slices) {
  spec.slice_channels = slices > 1 ? spec.out_channels / slices : 0;
  return spec;
}

// A 1x1 convolution that aten computes through the BLAS (slow_conv2d at one thread: one sgemm_ a
// image, pixels x input channels times input channels x output channels), where oneDNN's parts
// differ from it: sliced by output channels into GEMMs of their own, each slice starting on a
// multiple of the BLAS's column unit (blas_bands.h), which gives the whole call's bytes. The weight
// slice is read where it lies (the mapping) and the output written in place: no work arena.
struct GemmSlices {
  int64_t images = 0, in_channels = 0, pixels = 0, out_channels = 0, per_slice = 0, count = 0;
};

// The slices of the convolution `s` (conv_spec's) for `slices` slices; nullopt where it is no
// such convolution or the BLAS has no column unit.
std::optional<GemmSlices> gemm_slices(const onednn::SlicedConvSpec& s, uint32_t slices) {
  if (s.groups != 1 || s.bias || s.kh != 1 || s.kw != 1) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (s.stride[i] != 1 || s.padding[i] != 0 || s.dilation[i] != 1) return std::nullopt;
  }
  // Threads first: the column unit is learned once, and only a single-threaded BLAS has one.
  if (at::get_num_threads() != 1 || blas_bands::blas_threads() != 1) return std::nullopt;
  const int64_t unit = blas_bands::column_unit();
  if (unit == 0) return std::nullopt;
  GemmSlices g;
  g.images = s.n;
  g.in_channels = s.c;
  g.pixels = s.h * s.w;
  g.out_channels = s.out_channels;
  const int64_t even = (g.out_channels + slices - 1) / slices;
  g.per_slice = (even + unit - 1) / unit * unit;
  g.count = (g.out_channels + g.per_slice - 1) / g.per_slice;
  if (slices > 1 && g.count < 2) return std::nullopt;
  return g;
}

// Slice i of every image: output channels [i * per_slice, ...) = input (pixels x in) * weight rows.
void gemm_slice(const GemmSlices& g, const float* input, const float* weight, float* out,
                int64_t i) {
  const int64_t first = i * g.per_slice;
  const int64_t channels = std::min(g.per_slice, g.out_channels - first);
  for (int64_t n = 0; n < g.images; ++n) {
    blas_bands::gemm(g.pixels, channels, g.in_channels, input + n * g.in_channels * g.pixels,
                     g.pixels, weight + first * g.in_channels,
                     out + (n * g.out_channels + first) * g.pixels, g.pixels);
  }
}

at::Tensor gemm_output(const ConvArgs& a, const GemmSlices& g) {
  return at::empty({g.images, g.out_channels, a.input.size(2), a.input.size(3)}, a.input.options());
}

// Whether the slices give aten's bytes for this shape, slice count and thread count (checked once
// on a random probe, beside the pass).
bool checked_gemm_slices(const ConvArgs& a, const GemmSlices& g) {
  const std::vector<int64_t> key{
      g.images,        g.in_channels,        g.pixels, g.out_channels, g.per_slice,
      a.input.size(2), at::get_num_threads()};
  static auto* checks = new ChoiceCache<std::vector<int64_t>, bool>();
  return checks->decide(key, [&] {
    at::Generator generator = probe_generator();
    const at::Tensor probe = at::randn(a.input.sizes(), generator, a.input.options());
    at::Tensor out = gemm_output(a, g);
    for (int64_t i = 0; i < g.count; ++i) {
      gemm_slice(g, probe.data_ptr<float>(), a.weight.data_ptr<float>(), out.data_ptr<float>(), i);
    }
    const bool same = same_bytes(out, conv_whole(a, probe));
    if (!same) count_whole_after_check();
    return same;
  });
}

// Weight bytes a pass holds past the planner's even slices (two slices resident: one computing,
// one loading), page-rounded: what the planner is told as the slices' work.
uint64_t gemm_excess(const ConvArgs& a, const GemmSlices& g, uint32_t slices) {
  const uint64_t bytes = static_cast<uint64_t>(a.weight.nbytes());
  const uint64_t slice = static_cast<uint64_t>(g.per_slice * g.in_channels) * 4;
  const uint64_t excess = 2 * (slice - std::min(slice, bytes / slices));
  return (excess + 4095) / 4096 * 4096;
}

// The first call's facts: the most slices (each a multiple of 8 channels, oneDNN's AVX2 block)
// that compute aten's bytes, 0 when not even the whole in one part does, and each count's work.
uint32_t learn_budget_conv(const ConvArgs& a, const budget::Slicer& slicer) {
  std::vector<uint64_t> work;
  uint32_t most = 0;
  const std::optional<onednn::SlicedConvSpec> spec = conv_spec(a);
  // Worth it where the weight outweighs the input: a part lays out the whole input (a dense
  // convolution's slices all read it) in the work arena, which every convolution shares.
  const bool worth = a.weight.nbytes() >= static_cast<size_t>(kBudgetWeightBytes) &&
                     a.weight.nbytes() >= a.input.nbytes();
  if (spec && worth) {
    for (uint32_t slices = 1; slices <= kBudgetMostSlices; slices *= 2) {
      if (slices > 1 &&
          (spec->out_channels % slices != 0 || (spec->out_channels / slices) % 8 != 0)) {
        break;
      }
      const std::shared_ptr<const onednn::SlicedConv> conv =
          checked_parts(a, in_slices(*spec, slices));
      if (!conv) break;
      work.push_back(arena_layout(conv->buffers()).total);
      most = slices;
    }
    // Where oneDNN's one part differs: the BLAS's slices, one slice included (one GEMM a image,
    // as aten's call), so that every budget makes the same allocations.
    if (most == 0) {
      for (uint32_t slices = 1; slices <= kBudgetMostSlices; slices *= 2) {
        const std::optional<GemmSlices> g = gemm_slices(*spec, slices);
        if (!g || !checked_gemm_slices(a, *g)) break;
        work.push_back(gemm_excess(a, *g, slices));
        most = slices;
      }
    }
  }
  slicer.learn_conv(most, std::move(work));
  uint32_t known = 0;
  slicer.conv_known(&known);  // another thread may have learned first: its facts hold
  return known;
}

// SlicedConv's part hook: `context` is the budget's Slicer; part i is slice i.
void budget_part(void* context, size_t part, bool after) {
  const budget::Slicer& slicer = *static_cast<const budget::Slicer*>(context);
  const int slice = static_cast<int>(part);
  if (after) {
    slicer.done(slice);
  } else {
    slicer.load(slice + 1);  // overlapped with this slice's computing
  }
}

// What runs a convolution the budget does not slice: aten's, or in memory min's parts.
at::Tensor unsliced(const ConvArgs& a, bool memory_min) {
  return memory_min ? conv2d_sliced(a) : conv_whole(a, a.input);
}

at::Tensor budget_conv2d(const ConvArgs& a, int64_t module, bool memory_min) {
  budget::Slicer slicer =
      budget::slicer(module, a.weight.data_ptr(), static_cast<uint64_t>(a.weight.nbytes()));
  if (!slicer.state || !slicer.conv) return unsliced(a, memory_min);
  uint32_t most = 0;
  if (!slicer.conv_known(&most)) most = learn_budget_conv(a, slicer);
  if (most == 0) return unsliced(a, memory_min);
  const std::optional<onednn::SlicedConvSpec> spec = conv_spec(a);
  if (!spec) {  // learned on another shape: this one cannot be sliced
    slicer.refused();
    return unsliced(a, memory_min);
  }
  const uint32_t slices = std::min<uint32_t>(most, static_cast<uint32_t>(slicer.slices));
  if (gemm_slices(*spec, 1) && !checked_parts(a, in_slices(*spec, 1))) {  // the BLAS's slices
    const std::optional<GemmSlices> g = gemm_slices(*spec, slices);
    if (!g || !checked_gemm_slices(a, *g)) {
      slicer.refused();
      return unsliced(a, memory_min);
    }
    budget::Slicer parts = slicer;
    parts.slices = static_cast<int>(g->count);
    parts.slice_bytes = static_cast<uint64_t>(g->per_slice * g->in_channels) * 4;
    at::Tensor out = gemm_output(a, *g);
    for (int64_t i = 0; i < g->count; ++i) {
      // One slice: the weight as the plan holds it (pinned, or loaded and released by steps).
      if (g->count > 1) parts.load(static_cast<int>(i) + 1);  // overlapped with this slice
      gemm_slice(*g, a.input.data_ptr<float>(), a.weight.data_ptr<float>(), out.data_ptr<float>(),
                 i);
      if (g->count > 1) parts.done(static_cast<int>(i));
    }
    if (g->count > 1) count_convolution_in_parts();
    return out;
  }
  // Another shape or thread count than the first call's gets its own check.
  const std::shared_ptr<const onednn::SlicedConv> conv = checked_parts(a, in_slices(*spec, slices));
  if (!conv) {
    slicer.refused();
    return unsliced(a, memory_min);
  }
  const onednn::Shape o = conv->output();
  at::Tensor out = at::empty({o.n, o.c, o.h, o.w}, a.input.options());
  const ArenaLayout l = arena_layout(conv->buffers());
  char* arena = static_cast<char*>(slicer.work_arena(l.total));
  const onednn::SlicedConv::Buffers b = conv->buffers();
  const auto at_offset = [&](size_t bytes, size_t offset) -> void* {
    return bytes ? arena + offset : nullptr;
  };
  const float* bias = a.bias && a.bias->defined() ? a.bias->data_ptr<float>() : nullptr;
  conv->run(a.input.data_ptr<float>(), a.weight.data_ptr<float>(), bias, out.data_ptr<float>(),
            at_offset(b.input, l.input), at_offset(b.weights, l.weights),
            at_offset(b.output, l.output), at_offset(b.scratchpad, l.scratchpad),
            slices > 1 ? &budget_part : nullptr, &slicer);
  return out;
}

at::Tensor budget_conv2d_op(BudgetConv2dOp op) { return budget_conv2d(op, op.module, false); }
at::Tensor budget_conv2d_min_op(BudgetConv2dMinOp op) { return budget_conv2d(op, op.module, true); }

torch::jit::RegisterOperators budget_operators({
    op::make_operator<BudgetConv2dOp, &budget_conv2d_op>(),
    op::make_operator<BudgetConv2dMinOp, &budget_conv2d_min_op>(),
});

}  // namespace
}  // namespace memoplan::torch_ext

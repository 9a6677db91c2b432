// The region's channel rearrangements (blocked.h): a concatenation along the channels (and
// ShuffleNet's channel shuffle of it) and chunks, each a gather of whole channels into a new
// activation in the layout asked for (chunks: their input's). ShuffleNet's units are chunk,
// branch, cat and shuffle: made NCHW for them, every unit paid two conversions and nine aten
// calls. The gather, per layout: NCHW a plane per channel; NHWC per pixel; blocked, per output
// block of lanes, the runs of lanes that come from consecutive lanes of one source block, each
// copied across the block's pixels four lanes at a time, a shuffle's two alternating halves
// interleaved, and the padding lanes written zero (oneDNN reads them as zero). A batch norm (and
// ReLU) of the concatenation is done in the same gather where it may (cat_norm: scale_shift.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "blocked.h"
#include "blocked_tensor.h"
#include "memoplan/onednn/onednn.h"
#include "scale_shift.h"

namespace memoplan::torch_ext::blocked {
namespace {

using onednn::Format;
using onednn::PostOp;
using onednn::Shape;

// Output channel i comes from channel `channel` of source `source`.
struct From {
  int source = 0;
  int64_t channel = 0;
};

// A run of an output block's lanes: `length` lanes from `lane` on, read from `from` (the source's
// first pixel; a pixel further on is a block further on), or zeros where `from` is null.
struct Run {
  int64_t lane = 0, length = 0;
  const float* from = nullptr;
};
constexpr int kMaxBlock = 16;
struct Runs {
  Run run[kMaxBlock];
  int count = 0;
};

// The runs of output block `ob` of image `n`.
Runs block_runs(const std::vector<const float*>& sources, const std::vector<int64_t>& source_blocks,
                const std::vector<From>& map, int64_t n, int64_t ob, int64_t pixels,
                int64_t block) {
  Runs runs;
  for (int64_t lane = 0; lane < block; ++lane) {
    const int64_t o = ob * block + lane;
    const float* from = nullptr;
    if (o < static_cast<int64_t>(map.size())) {
      const From f = map[static_cast<size_t>(o)];
      from = sources[f.source] +
             ((n * source_blocks[f.source] + f.channel / block) * pixels) * block +
             f.channel % block;
    }
    Run* last = runs.count == 0 ? nullptr : &runs.run[runs.count - 1];
    if (last && ((from == nullptr && last->from == nullptr) ||
                 (from != nullptr && last->from != nullptr && from == last->from + last->length))) {
      ++last->length;
    } else {
      runs.run[runs.count++] = {lane, 1, from};
    }
  }
  return runs;
}

// d[p * block + i] = s[p * block + i] (zeros for a null s), i < n, for every pixel p, four lanes
// at a time across the pixels. Up to three lanes past n are written too where the block has them
// (runs go in lane order: the next run writes them again) and read (a source's lanes run on into
// its next pixel, and after its last one into the tag that follows every blocked activation).
void copy_span(float* d, const float* s, int64_t lane, int64_t n, int64_t pixels, int64_t block) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i < n && lane + i + 4 <= block; i += 4) {
    if (s) {
      for (int64_t p = 0; p < pixels; ++p) {
        _mm_storeu_ps(d + p * block + lane + i, _mm_loadu_ps(s + p * block + i));
      }
    } else {
      for (int64_t p = 0; p < pixels; ++p)
        _mm_storeu_ps(d + p * block + lane + i, _mm_setzero_ps());
    }
  }
#endif
  for (; i < n; ++i) {
    for (int64_t p = 0; p < pixels; ++p) d[p * block + lane + i] = s ? s[p * block + i] : 0.f;
  }
}

// Whether the block's lanes alternate between two spans: lane 2k from a + k, 2k + 1 from b + k
// (a channel shuffle of two groups).
bool alternating(const Runs& runs, int64_t block) {
  if (runs.count != block) return false;
  for (int64_t k = 0; k < block / 2; ++k) {
    const Run &a = runs.run[2 * k], &b = runs.run[2 * k + 1];
    if (!a.from || !b.from || a.from != runs.run[0].from + k || b.from != runs.run[1].from + k) {
      return false;
    }
  }
  return true;
}

void interleave(float* d, const float* a, const float* b, int64_t pixels, int64_t block) {
  for (int64_t p = 0; p < pixels; ++p, d += block, a += block, b += block) {
    int64_t k = 0;
#if defined(__SSE2__)
    for (; k + 4 <= block / 2; k += 4) {
      const __m128 va = _mm_loadu_ps(a + k), vb = _mm_loadu_ps(b + k);
      _mm_storeu_ps(d + 2 * k, _mm_unpacklo_ps(va, vb));
      _mm_storeu_ps(d + 2 * k + 4, _mm_unpackhi_ps(va, vb));
    }
#endif
    for (; k < block / 2; ++k) {
      d[2 * k] = a[k];
      d[2 * k + 1] = b[k];
    }
  }
}

// One output block's pixels, as its runs say; with `ss`, scaled and shifted (lanes from its
// alpha, beta: the block's).
void copy_block(float* d, const Runs& runs, int64_t pixels, int64_t block,
                const ScaleShift* ss = nullptr, int64_t first_channel = 0) {
  if (ss) {
    for (int i = 0; i < runs.count; ++i) {
      const Run& r = runs.run[i];
      const float* alpha = ss->alpha.data() + first_channel + r.lane;
      const float* beta = ss->beta.data() + first_channel + r.lane;
      for (int64_t p = 0; p < pixels; ++p) {
        if (r.from) {
          scale_shift(r.from + p * block, d + p * block + r.lane, r.length, alpha, beta, 0,
                      ss->floor);
        } else {
          std::fill_n(d + p * block + r.lane, r.length, 0.f);
        }
      }
    }
    return;
  }
  if (runs.count == 1 && runs.run[0].from) {  // a whole source block: its pixels in a row
    std::memcpy(d, runs.run[0].from, static_cast<size_t>(pixels * block) * sizeof(float));
    return;
  }
  if (alternating(runs, block)) {
    interleave(d, runs.run[0].from, runs.run[1].from, pixels, block);
    return;
  }
  for (int i = 0; i < runs.count; ++i) {
    const Run& r = runs.run[i];
    copy_span(d, r.from, r.lane, r.length, pixels, block);
  }
}

// A new activation of `map.size()` channels in layout `f`, channel i `map[i]` of `xs` (each dense
// in `f`, of one batch and size); with `ss`, channel i scaled and shifted by its terms.
at::Tensor gather(const std::vector<at::Tensor>& xs, const std::vector<From>& map, Format f,
                  const ScaleShift* ss = nullptr) {
  const Shape s = shape_of(xs.at(0));
  const int64_t channels = static_cast<int64_t>(map.size()), pixels = s.h * s.w;
  at::Tensor out = new_tensor({s.n, channels, s.h, s.w}, f, xs[0].options());
  float* dst = out.data_ptr<float>();
  const int64_t block = onednn::block_size();
  TORCH_CHECK(f != Format::kBlocked || (block > 0 && block <= kMaxBlock), "memoplan: block size ",
              block);
  std::vector<const float*> sources;
  std::vector<int64_t> source_channels, source_blocks;
  for (const at::Tensor& x : xs) {
    sources.push_back(x.data_ptr<float>());
    source_channels.push_back(x.size(1));
    if (f == Format::kBlocked) source_blocks.push_back(onednn::padded_channels(x.size(1)) / block);
  }
  const int64_t units =
      f == Format::kBlocked ? s.n * onednn::padded_channels(channels) / block : s.n;
  // About 32k floats a task: a small activation's gather stays on the calling thread.
  const int64_t floats_per_unit = f == Format::kBlocked ? pixels * block : channels * pixels;
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, floats_per_unit));
  at::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      if (f == Format::kBlocked) {
        const int64_t blocks = onednn::padded_channels(channels) / block;
        const int64_t n = unit / blocks, ob = unit % blocks;
        copy_block(dst + unit * pixels * block,
                   block_runs(sources, source_blocks, map, n, ob, pixels, block), pixels, block, ss,
                   ob * block);
      } else if (f == Format::kNchw) {
        const int64_t n = unit;
        for (int64_t o = 0; o < channels; ++o) {
          const From from = map[static_cast<size_t>(o)];
          const float* plane =
              sources[from.source] + (n * source_channels[from.source] + from.channel) * pixels;
          float* out_plane = dst + (n * channels + o) * pixels;
          if (ss) {
            scale_shift(plane, out_plane, pixels, ss->alpha.data() + o, ss->beta.data() + o, 1,
                        ss->floor);
          } else {
            std::memcpy(out_plane, plane, static_cast<size_t>(pixels) * sizeof(float));
          }
        }
      } else {  // NHWC
        const int64_t n = unit;
        for (int64_t p = 0; p < pixels; ++p) {
          float* d = dst + (n * pixels + p) * channels;
          for (int64_t o = 0; o < channels; ++o) {
            const From from = map[static_cast<size_t>(o)];
            const int64_t c = source_channels[from.source];
            float v = sources[from.source][(n * pixels + p) * c + from.channel];
            if (ss) {
              v = v * ss->alpha[static_cast<size_t>(o)] + ss->beta[static_cast<size_t>(o)];
              v = ss->floor > v ? ss->floor : v;
            }
            d[o] = v;
          }
        }
      }
    }
  });
  return out;
}

// The channels of xs in order, empty where their batch or pixels differ (aten's error then).
std::vector<From> concatenated(const std::vector<at::Tensor>& xs) {
  const Shape s = shape_of(xs.at(0));
  std::vector<From> cat;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape si = shape_of(xs[i]);
    if (si.n != s.n || si.h != s.h || si.w != s.w) return {};
    for (int64_t c = 0; c < si.c; ++c) cat.push_back({static_cast<int>(i), c});
  }
  return cat;
}

}  // namespace

at::Tensor cat_channels(const std::vector<at::Tensor>& xs_in, int64_t groups, Format output) {
  std::vector<at::Tensor> xs;
  for (const at::Tensor& x : xs_in) xs.push_back(convert(x, output));
  const Shape s = shape_of(xs.at(0));
  const std::vector<From> cat = concatenated(xs);
  const int64_t channels = static_cast<int64_t>(cat.size());
  if (cat.empty() || groups < 1 || channels % groups != 0) {
    // aten's result, or its error
    std::vector<at::Tensor> plain;
    for (const at::Tensor& x : xs) plain.push_back(to_plain(x));
    at::Tensor y = at::cat(plain, 1);
    if (groups != 1) {
      y = y.view({s.n, groups, channels / std::max<int64_t>(groups, 1), s.h, s.w})
              .transpose(1, 2)
              .contiguous()
              .view({s.n, -1, s.h, s.w});
    }
    return convert(y, output);
  }
  // The shuffle: view (N, g, C/g, H, W), transpose(1, 2): channel i of the result is channel
  // (i % g) * (C/g) + i / g of the concatenation.
  std::vector<From> map(cat.size());
  const int64_t per_group = channels / groups;
  for (int64_t i = 0; i < channels; ++i) {
    map[static_cast<size_t>(i)] = cat[static_cast<size_t>((i % groups) * per_group + i / groups)];
  }
  return gather(xs, map, output);
}

at::Tensor cat_norm(const std::vector<at::Tensor>& xs_in, const BatchNormArgs& bn,
                    const std::vector<PostOp>& post, Format output) {
  std::vector<at::Tensor> xs;
  for (const at::Tensor& x : xs_in) xs.push_back(convert(x, output));
  const std::vector<From> cat = concatenated(xs);
  const int64_t channels = static_cast<int64_t>(cat.size());
  const bool needs_grad =
      at::GradMode::is_enabled() &&
      std::any_of(xs.begin(), xs.end(), [](const at::Tensor& x) { return x.requires_grad(); });
  if (cat.empty() || !scale_shift_applies(channels, needs_grad, bn, post)) {
    return batch_norm(cat_channels(xs, 1, output), bn, post);
  }
  const int64_t padded = output == Format::kBlocked ? onednn::padded_channels(channels) : channels;
  const ScaleShift ss = scale_shift_of(bn, channels, padded, post);
  return gather(xs, cat, output, &ss);
}

c10::List<at::Tensor> chunk_channels(const at::Tensor& x_in, int64_t chunks) {
  const at::Tensor x = dense(x_in, "bchunk");
  const int64_t c = x.size(1);
  c10::List<at::Tensor> out;
  if (chunks <= 0 || c == 0) {  // aten's error, or its one empty chunk
    for (const at::Tensor& part : to_plain(x).chunk(chunks, 1)) out.push_back(part);
    return out;
  }
  // aten::chunk's split: chunks of ceil(C / chunks) channels, the last what is left.
  const int64_t step = (c + chunks - 1) / chunks;
  for (int64_t start = 0; start < c; start += step) {
    std::vector<From> map;
    for (int64_t i = start; i < std::min(c, start + step); ++i) map.push_back({0, i});
    out.push_back(gather({x}, map, format_of(x)));
  }
  return out;
}

}  // namespace memoplan::torch_ext::blocked

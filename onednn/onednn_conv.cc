// The convolution primitive (onednn.h), its input and output each blocked or plain: its epilogue
// (bias, activations, a residual addition; a last SiLU possibly after the call), weights packed in
// the layout it reads, cached per shape and thread count.
#include <algorithm>
#include <vector>

#include "onednn_common.h"

namespace memoplan::onednn {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file's whole vocabulary

// The block of output channels of weight layout `d` where they are its outermost dimension and
// the layout has no padding of them: a packing of a slice of them starting at a multiple of the
// block is then a part of the whole packing of its own (memory::desc::submemory_desc). 0 where
// they are not (its packing is made in one piece).
int64_t output_channel_block(const memory::desc& d) {
#if DNNL_VERSION_MAJOR >= 3
  if (d.get_format_kind() != dnnl::memory::format_kind::blocked) return 0;
  const memory::dims dims = d.get_dims(), padded = d.get_padded_dims(), strides = d.get_strides();
  const memory::dims blocks = d.get_inner_blks(), indices = d.get_inner_idxs();
  const int nblocks = d.get_inner_nblks();
#else
  const dnnl_memory_desc_t& c = d.data;
  if (c.format_kind != dnnl_blocked) return 0;
  const memory::dims dims(c.dims, c.dims + c.ndims), padded(c.padded_dims, c.padded_dims + c.ndims);
  const auto& b = c.format_desc.blocking;
  const memory::dims strides(b.strides, b.strides + c.ndims);
  const memory::dims blocks(b.inner_blks, b.inner_blks + b.inner_nblks);
  const memory::dims indices(b.inner_idxs, b.inner_idxs + b.inner_nblks);
  const int nblocks = b.inner_nblks;
#endif
  if (dims.empty() || padded[0] != dims[0]) return 0;
  for (size_t i = 1; i < strides.size(); ++i) {
    if (strides[i] > strides[0]) return 0;
  }
  int64_t block = 1;
  for (int i = 0; i < nblocks; ++i) {
    if (indices[static_cast<size_t>(i)] == 0) block *= blocks[static_cast<size_t>(i)];
  }
  return block;
}

// Output channels (rows of `per_row` floats) per packing slice: the most whose weight fits in
// kPackingSliceBytes, in whole blocks of `block`, at least one block.
int64_t slice_rows(int64_t per_row, int64_t block) {
  const auto fit = static_cast<int64_t>(kPackingSliceBytes / sizeof(float)) / per_row;
  return std::max<int64_t>(block, fit / block * block);
}

class ConvImpl final : public Conv {
 public:
  explicit ConvImpl(const ConvSpec& s) : spec_(s) {
    const int64_t oh = conv_output_side(s.h, s.padding[0], s.dilation[0], s.kh, s.stride[0]);
    const int64_t ow = conv_output_side(s.w, s.padding[1], s.dilation[1], s.kw, s.stride[1]);
    if (oh <= 0 || ow <= 0) throw std::invalid_argument("memoplan: convolution output is empty");
    out_ = {s.n, s.out_channels, oh, ow};
    const memory::desc src = desc({s.n, s.c, s.h, s.w}, s.input);
    const memory::desc dst = desc(out_, s.output);
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
    // SiLU last: after the call, where memoplan's kernel is the faster (silu_after_the_call).
    std::vector<PostOp> fused = s.post;
    silu_after_ = !fused.empty() && fused.back().kind == static_cast<int>(Eltwise::kSilu) &&
                  silu_after_the_call();
    if (silu_after_) fused.pop_back();
    const dnnl::primitive_attr attr = attributes(fused, &dst);
    const algorithm algo =
        s.winograd ? algorithm::convolution_winograd : algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
    pd_ = dnnl::convolution_forward::primitive_desc(engine(), prop_kind::forward_inference, algo,
                                                    src, weights_any, bias, dst, strides, dilation,
                                                    padding, padding, attr);
#else
    const dnnl::convolution_forward::desc d(prop_kind::forward_inference, algo, src, weights_any,
                                            bias, dst, strides, dilation, padding, padding);
    pd_ = dnnl::convolution_forward::primitive_desc(d, attr, engine());
#endif
    primitive_ = dnnl::convolution_forward(pd_);
    residual_slot_ = residual_slot(fused);
    sums_ = std::any_of(s.post.begin(), s.post.end(),
                        [](const PostOp& op) { return op.kind == kResidualSum; });
    std::vector<std::pair<int, memory::desc>> args = {{DNNL_ARG_SRC, pd_.src_desc()},
                                                      {DNNL_ARG_WEIGHTS, pd_.weights_desc()},
                                                      {DNNL_ARG_BIAS, pd_.bias_desc()},
                                                      {DNNL_ARG_DST, pd_.dst_desc()},
                                                      {DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc()}};
    if (residual_slot_ >= 0) {
      args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_slot_) | DNNL_ARG_SRC_1,
                        pd_.dst_desc());
    }
    args_ = std::make_unique<const BoundArgs>(std::move(args));
    // What the calls ask for, read from the descriptor once: each query is a library call (and
    // the implementation's name a string), asked on every pass of a small layer.
    weights_desc_ = pd_.weights_desc();
    block_ = output_channel_block(weights_desc_);
    scratchpad_bytes_ = pd_.scratchpad_desc().get_size();
    dst_bytes_ = pd_.dst_desc().get_size();
    implementation_ = pd_.impl_info_str();
  }

  Shape output() const override { return out_; }
  size_t scratchpad_bytes() const override { return scratchpad_bytes_; }
  size_t packed_weights_bytes() const override { return weights_desc_.get_size(); }
  const std::string& implementation() const override { return implementation_; }
  bool same_packing(const Conv& other) const override {
    const auto* o = dynamic_cast<const ConvImpl*>(&other);
    return o != nullptr && (o == this || o->weights_desc_ == weights_desc_);
  }
  bool pack_weights(const float* weight, void* packed, const float* scales,
                    const RowsPacked& rows_packed) const override {
    if (spec_.winograd) return pack_winograd(weight, packed, scales, rows_packed);
    const int64_t rows = spec_.out_channels;
    const int64_t per_row = spec_.c / spec_.groups * spec_.kh * spec_.kw;
    const int64_t step =
        rows_packed && spec_.groups == 1 && block_ > 0 ? slice_rows(per_row, block_) : rows;
    if (step >= rows) {
      // Output channels: dimension 0 of oihw, 0 and 1 (groups, channels of each) of goihw.
      const int mask = user_weights_tag_ == tag::goihw ? 0b11 : 0b1;
      if (!reorder_into(user_weights_, weight, weights_desc_, packed, scales, rows, mask)) {
        return false;
      }
      if (rows_packed) rows_packed(0, rows);
      return true;
    }
    for (int64_t first = 0; first < rows; first += step) {
      const int64_t count = std::min(step, rows - first);
      const memory::dims part = {count, spec_.c, spec_.kh, spec_.kw};
      // The first slice tells whether oneDNN scales into this layout: nothing written otherwise.
      if (!reorder_into(memory::desc(part, dt::f32, tag::oihw), weight + first * per_row,
                        weights_desc_.submemory_desc(part, {first, 0, 0, 0}), packed,
                        scales ? scales + first : nullptr, count, 0b1)) {
        return false;
      }
      rows_packed(first, count);
    }
    return true;
  }
  void run(const float* input, const void* packed_weights, const float* bias, const float* residual,
           float* output, void* scratchpad) const override {
    const void* data[] = {input, packed_weights, bias, output, scratchpad, residual};
    execute(primitive_, *args_, data, threads_, sums_, output, dst_bytes_, silu_after_);
  }

 private:
  // oneDNN's Winograd packing. Its reorder holds the whole weight transformed as its scratchpad
  // (16/9 to 4x the weight's bytes), and it cannot scale (oneDNN 2.6 packs other bytes than the
  // folded weight's: BlockedLayout.PackingWithScalesIsPackingTheFoldedWeight), so packed whole a
  // 512 -> 512 layer's weight, its folded copy, that scratchpad and the packing were all resident
  // at once: 35 MiB above the packing, resnet18's tuned peak. With scales or rows_packed it packs
  // in chunks of output channels instead, each folded into a slice of its own and reordered on
  // its own (winograd_chunks), its plain rows given back as it goes.
  bool pack_winograd(const float* weight, void* packed, const float* scales,
                     const RowsPacked& rows_packed) const {
    if ((scales || rows_packed) && pack_winograd_in_chunks(weight, packed, scales, rows_packed)) {
      return true;
    }
    if (scales) return false;
    reorder_into(user_weights_, weight, weights_desc_, packed);
    if (rows_packed) rows_packed(0, spec_.out_channels);
    return true;
  }
  bool pack_winograd_in_chunks(const float* weight, void* packed, const float* scales,
                               const RowsPacked& rows_packed) const;

  memory::desc weights_desc_;
  int64_t block_ = 0;  // output_channel_block(weights_desc_)
  size_t scratchpad_bytes_ = 0, dst_bytes_ = 0;
  std::string implementation_;
  ThreadChoice threads_;
  ConvSpec spec_;
  Shape out_;
  tag user_weights_tag_ = tag::oihw;
  memory::desc user_weights_;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::convolution_forward primitive_;
  int residual_slot_ = -1;
  bool sums_ = false;        // kResidualSum: the output is read too
  bool silu_after_ = false;  // the epilogue's last SiLU run by kernels::silu after the call
  std::unique_ptr<const BoundArgs> args_;
};

// The layout of oneDNN 2.x's Winograd weights (its wino_reorder_t): for each of the alpha x alpha
// tile positions, the output channels outermost in steps of `unit` (aaOIoi, aaOio, aaOBiOo), or
// those steps outermost of all (OBaaIBOIio). A chunk of output channels starting at a multiple of
// `unit`, packed on its own, is then `tiles` runs of the whole packing (one, OBaaIBOIio).
struct WinogradChunks {
  int64_t unit = 0;        // 0: not a layout of these
  int64_t oc = 0, ic = 0;  // the layout's (padded) channels
  int64_t tiles = 0;       // alpha x alpha
  bool chunk_outermost = false;
};

#if DNNL_VERSION_MAJOR < 3
WinogradChunks winograd_chunks(const dnnl_memory_desc_t& d) {
  WinogradChunks c;
  if (d.format_kind != dnnl_format_kind_wino || d.ndims != 4 || d.data_type != dnnl_f32) return c;
  const dnnl_wino_desc_t& w = d.format_desc.wino_desc;
  c.oc = w.oc;
  c.ic = w.ic;
  c.tiles = static_cast<int64_t>(w.alpha) * w.alpha;
  if (c.oc <= 0 || c.ic <= 0 || w.oc_block <= 0 ||
      w.size != static_cast<size_t>(c.tiles * c.oc * c.ic) * sizeof(float)) {
    return c;
  }
  switch (w.wino_format) {
    case dnnl_wino_wei_aaOIoi:
    case dnnl_wino_wei_aaOio:
      c.unit = w.oc_block;
      break;
    case dnnl_wino_wei_aaOBiOo:
      c.unit = static_cast<int64_t>(w.oc_block) * std::max(1, w.oc2_block);
      break;
    case dnnl_wino_wei_OBaaIBOIio:
      c.unit = static_cast<int64_t>(w.oc_block) * std::max(1, w.oc2_block);
      c.chunk_outermost = true;
      break;
    default:
      break;
  }
  if (c.unit <= 0 || c.oc % c.unit != 0) c.unit = 0;
  return c;
}
#endif

bool ConvImpl::pack_winograd_in_chunks(const float* weight, void* packed, const float* scales,
                                       const RowsPacked& rows_packed) const {
#if DNNL_VERSION_MAJOR < 3
  const dnnl_memory_desc_t& whole = weights_desc_.data;
  const WinogradChunks c = winograd_chunks(whole);
  if (c.unit == 0 || spec_.groups != 1 || whole.dims[0] != spec_.out_channels) return false;
  const int64_t rows = spec_.out_channels, per_row = spec_.c * spec_.kh * spec_.kw;
  const int64_t step = slice_rows(per_row, c.unit);
  std::vector<float> folded, chunk_packing;
  auto* out = static_cast<float*>(packed);
  for (int64_t first = 0; first < rows;) {
    // The last chunk takes the layout's padding channels too (no rows of their own).
    const int64_t count = first + step >= rows ? c.oc - first : step;
    const int64_t read = std::min(count, rows - first);
    const float* from = weight + first * per_row;
    if (scales) {
      folded.resize(static_cast<size_t>(read * per_row));
      for (int64_t r = 0; r < read; ++r) {
        for (int64_t i = 0; i < per_row; ++i) {
          folded[static_cast<size_t>(r * per_row + i)] = from[r * per_row + i] * scales[first + r];
        }
      }
      from = folded.data();
    }
    dnnl_memory_desc_t part = whole;
    part.dims[0] = part.padded_dims[0] = read;
    part.format_desc.wino_desc.oc = static_cast<int>(count);
    part.format_desc.wino_desc.size = static_cast<size_t>(c.tiles * count * c.ic) * sizeof(float);
    const memory::desc source({read, spec_.c, spec_.kh, spec_.kw}, dt::f32, tag::oihw);
    const size_t piece = static_cast<size_t>(count * c.ic);
    if (c.chunk_outermost) {
      reorder_into(source, from, memory::desc(part), out + first * c.tiles * c.ic);
    } else {
      chunk_packing.resize(piece * static_cast<size_t>(c.tiles));
      reorder_into(source, from, memory::desc(part), chunk_packing.data());
      for (int64_t t = 0; t < c.tiles; ++t) {
        std::copy_n(chunk_packing.data() + static_cast<size_t>(t) * piece, piece,
                    out + (t * c.oc + first) * c.ic);
      }
    }
    if (rows_packed) rows_packed(first, read);
    first += count;
  }
  return true;
#else
  (void)weight, (void)packed, (void)scales, (void)rows_packed;
  return false;  // oneDNN 3's Winograd layouts are opaque
#endif
}

}  // namespace

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
             static_cast<int64_t>(s.input),
             static_cast<int64_t>(s.output),
             threads(),
             s.winograd ? 1 : 0};
  append(key, s.post);
  return cached<Conv>("convolution", std::move(key), [&] { return std::make_shared<ConvImpl>(s); });
}

}  // namespace memoplan::onednn

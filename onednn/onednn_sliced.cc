// A plain NCHW convolution computed in parts (onednn.h's SlicedConv): for each band of output rows
// or slice of output channels, the input rows (with the rows the kernel reaches beyond the band)
// or channels it reads are laid out as the part's convolution wants them, the weights too, the
// convolution writes the part in its own layout, and a reorder puts it in its place in the
// output. Formats are oneDNN's choice ("any"), as aten's own oneDNN path asks for them.
#include <unordered_map>

#include "onednn_common.h"

namespace memoplan::onednn {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file's whole vocabulary

// The primitives of one part shape (bands of equal height share them).
struct Step {
  memory::desc user_src, user_weights, user_dst, bias;
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward conv;
  dnnl::reorder src_reorder, weights_reorder, dst_reorder;
  bool src_as_is = false, dst_as_is = false;  // the user's layout is the convolution's
};

struct Part {
  int64_t row0 = 0, in_row0 = 0;  // first output row, first input row read
  int64_t ch0 = 0, in_ch0 = 0;    // first output channel, first input channel read
  std::shared_ptr<const Step> step;
};

memory::desc strided(memory::dims dims, memory::dims strides) {
  return memory::desc(std::move(dims), dt::f32, std::move(strides));
}

class SlicedConvImpl final : public SlicedConv {
 public:
  explicit SlicedConvImpl(const SlicedConvSpec& s) : s_(s) {
    const int64_t reach_h = s.dilation[0] * (s.kh - 1) + 1;  // input rows one output row reads
    const int64_t oh = conv_output_side(s.h, s.padding[0], s.dilation[0], s.kh, s.stride[0]);
    const int64_t ow = conv_output_side(s.w, s.padding[1], s.dilation[1], s.kw, s.stride[1]);
    if (oh <= 0 || ow <= 0) throw std::invalid_argument("memoplan: convolution output is empty");
    out_ = {s.n, s.out_channels, oh, ow};
    const bool depthwise = s.groups > 1;
    const int64_t band = s.band_rows > 0 ? std::min(s.band_rows, oh) : oh;
    const int64_t slice =
        s.slice_channels > 0 ? std::min(s.slice_channels, s.out_channels) : s.out_channels;
    std::map<Key, std::shared_ptr<const Step>> steps;
    for (int64_t row0 = 0; row0 < oh; row0 += band) {
      for (int64_t ch0 = 0; ch0 < s.out_channels; ch0 += slice) {
        const int64_t rows = std::min(band, oh - row0), chs = std::min(slice, s.out_channels - ch0);
        const int64_t lo = row0 * s.stride[0] - s.padding[0];
        const int64_t hi = (row0 + rows - 1) * s.stride[0] - s.padding[0] + reach_h;
        Part part;
        part.row0 = row0;
        part.in_row0 = std::max<int64_t>(0, lo);
        part.ch0 = ch0;
        part.in_ch0 = depthwise ? ch0 : 0;
        // A band reads its rows as the whole convolution sees them: up to the next band's first
        // row (a strided 1x1 kernel skips rows, yet its input spans them) and, for the last band,
        // to the input's end with the whole's bottom padding. oneDNN picks its kernel by the
        // shape, and a part must get the whole's kernel to compute the whole's bytes.
        const bool last = row0 + rows == oh;
        const int64_t span = std::max(hi, (row0 + rows) * s.stride[0] - s.padding[0]);
        const int64_t in_end = last ? s.h : std::min(s.h, span);
        const int64_t in_rows = in_end - part.in_row0;
        const int64_t pad_top = part.in_row0 - lo;
        const int64_t pad_bottom = last ? s.padding[0] : std::max<int64_t>(0, hi - in_end);
        if (in_rows <= 0) throw std::invalid_argument("memoplan: a band reads no input row");
        Key key = {rows, chs, in_rows, pad_top, pad_bottom};
        auto& step = steps[key];
        if (!step) step = make_step(rows, chs, in_rows, pad_top, pad_bottom);
        part.step = step;
        parts_.push_back(std::move(part));
      }
    }
    for (const auto& [key, step] : steps) {
      if (!step->src_as_is)
        buffers_.input = std::max(buffers_.input, step->pd.src_desc().get_size());
      buffers_.weights = std::max(buffers_.weights, step->pd.weights_desc().get_size());
      if (!step->dst_as_is) {
        buffers_.output = std::max(buffers_.output, step->pd.dst_desc().get_size());
      }
      buffers_.scratchpad = std::max(buffers_.scratchpad, step->pd.scratchpad_desc().get_size());
    }
  }

  Shape output() const override { return out_; }
  Buffers buffers() const override { return buffers_; }
  size_t parts() const override { return parts_.size(); }

  void run(const float* input, const float* weight, const float* bias, float* output,
           void* input_part, void* weights_part, void* output_part, void* scratchpad, PartHook hook,
           void* context) const override {
    const SlicedConvSpec& s = s_;
    const int64_t weights_per_channel = s.c / s.groups * s.kh * s.kw;
    dnnl::stream& st = stream();
    // What the buffers hold now: a part whose input or weights are laid out the same way from the
    // same rows and channels reuses them (slices of a dense convolution share the input, bands
    // the weights).
    const Step* input_of = nullptr;
    int64_t input_row = -1, input_ch = -1;
    const Step* weights_of = nullptr;
    int64_t weights_ch = -1;
    for (size_t index = 0; index < parts_.size(); ++index) {
      const Part& part = parts_[index];
      const Step& step = *part.step;
      if (hook) hook(context, index, false);
      const float* src = input + (part.in_ch0 * s.h + part.in_row0) * s.w;
      memory src_memory = bind(step.user_src, src);
      if (!step.src_as_is) {
        memory laid = bind(step.pd.src_desc(), input_part);
        const bool same = input_of && input_of->pd.src_desc() == step.pd.src_desc() &&
                          input_of->user_src == step.user_src && input_row == part.in_row0 &&
                          input_ch == part.in_ch0;
        if (!same) step.src_reorder.execute(st, src_memory, laid);
        input_of = &step;
        input_row = part.in_row0;
        input_ch = part.in_ch0;
        src_memory = laid;
      }
      memory weights_memory = bind(step.pd.weights_desc(), weights_part);
      const bool same_weights = weights_of &&
                                weights_of->pd.weights_desc() == step.pd.weights_desc() &&
                                weights_ch == part.ch0;
      if (!same_weights) {
        memory user = bind(step.user_weights, weight + part.ch0 * weights_per_channel);
        step.weights_reorder.execute(st, user, weights_memory);
        weights_of = &step;
        weights_ch = part.ch0;
      }
      float* dst = output + (part.ch0 * out_.h + part.row0) * out_.w;
      memory user_dst = bind(step.user_dst, dst);
      memory dst_memory = step.dst_as_is ? user_dst : bind(step.pd.dst_desc(), output_part);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, src_memory},
          {DNNL_ARG_WEIGHTS, weights_memory},
          {DNNL_ARG_DST, dst_memory},
          {DNNL_ARG_SCRATCHPAD, bind(step.pd.scratchpad_desc(), scratchpad)}};
      if (s.bias) args.emplace(DNNL_ARG_BIAS, bind(step.bias, bias + part.ch0));
      step.conv.execute(st, args);
      if (!step.dst_as_is) step.dst_reorder.execute(st, dst_memory, user_dst);
      if (hook) {
        st.wait();  // the part's weights are read: they may go
        hook(context, index, true);
      }
    }
    st.wait();
  }

 private:
  std::shared_ptr<const Step> make_step(int64_t rows, int64_t chs, int64_t in_rows, int64_t pad_top,
                                        int64_t pad_bottom) const {
    const SlicedConvSpec& s = s_;
    auto step = std::make_shared<Step>();
    const bool depthwise = s.groups > 1;
    const int64_t in_chs = depthwise ? chs : s.c;
    // The user's tensors seen through the part: its rows and channels, the whole's strides.
    step->user_src = strided({s.n, in_chs, in_rows, s.w}, {s.c * s.h * s.w, s.h * s.w, s.w, 1});
    step->user_dst =
        strided({s.n, chs, rows, out_.w}, {out_.c * out_.h * out_.w, out_.h * out_.w, out_.w, 1});
    memory::dims wdims = {chs, s.c / s.groups, s.kh, s.kw};
    tag wtag = tag::oihw;
    if (depthwise) {
      wdims = {chs, 1, 1, s.kh, s.kw};
      wtag = tag::goihw;
    }
    step->user_weights = memory::desc(wdims, dt::f32, wtag);
    step->bias = memory::desc({chs}, dt::f32, tag::x);
    const memory::desc src({s.n, in_chs, in_rows, s.w}, dt::f32, tag::any);
    const memory::desc weights(wdims, dt::f32, tag::any);
    const memory::desc dst({s.n, chs, rows, out_.w}, dt::f32, tag::any);
    const memory::dims strides = {s.stride[0], s.stride[1]};
    const memory::dims dilation = {s.dilation[0] - 1, s.dilation[1] - 1};
    const memory::dims padding_l = {pad_top, s.padding[1]};
    const memory::dims padding_r = {pad_bottom, s.padding[1]};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const memory::desc bias = s.bias ? step->bias : memory::desc();  // empty: no bias
#if DNNL_VERSION_MAJOR >= 3
    step->pd = dnnl::convolution_forward::primitive_desc(
        engine(), prop_kind::forward_training, algorithm::convolution_direct, src, weights, bias,
        dst, strides, dilation, padding_l, padding_r, attr);
#else
    const dnnl::convolution_forward::desc d(prop_kind::forward_training,
                                            algorithm::convolution_direct, src, weights, bias, dst,
                                            strides, dilation, padding_l, padding_r);
    step->pd = dnnl::convolution_forward::primitive_desc(d, attr, engine());
#endif
    step->conv = dnnl::convolution_forward(step->pd);
    step->src_as_is = step->pd.src_desc() == step->user_src;
    step->dst_as_is = step->pd.dst_desc() == step->user_dst;
    if (!step->src_as_is) {
      step->src_reorder = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine(), step->user_src, engine(), step->pd.src_desc()));
    }
    step->weights_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(
        engine(), step->user_weights, engine(), step->pd.weights_desc()));
    if (!step->dst_as_is) {
      step->dst_reorder = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine(), step->pd.dst_desc(), engine(), step->user_dst));
    }
    return step;
  }

  SlicedConvSpec s_;
  Shape out_;
  std::vector<Part> parts_;
  Buffers buffers_;
};

}  // namespace

std::vector<int64_t> spec_key(const SlicedConvSpec& s) {
  return {s.n,
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
          s.band_rows,
          s.slice_channels,
          s.bias};
}

std::shared_ptr<const SlicedConv> sliced_conv(const SlicedConvSpec& s) {
  Key key = spec_key(s);
  key.push_back(threads());
  return cached<SlicedConv>("sliced convolution", std::move(key),
                            [&] { return std::make_shared<SlicedConvImpl>(s); });
}

}  // namespace memoplan::onednn

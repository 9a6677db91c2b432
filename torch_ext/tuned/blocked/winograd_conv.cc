// best_conv (winograd_conv.h): memoplan's Winograd convolution as an onednn::Conv, and the
// per-shape measurement against oneDNN's.
#include "winograd_conv.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "budget/released_weights.h"
#include "memoplan/kernels/winograd.h"
#include "memoplan/torch/kernels.h"
#include "planning/choice_cache.h"
#include "planning/planning.h"  // module_options, module_weight_bytes
#include "tuned/reports.h"
#include "tuned/tuned_support.h"

namespace memoplan::torch_ext::blocked {
namespace {

namespace wino = kernels::winograd;

class WinogradConv final : public onednn::Conv {
 public:
  WinogradConv(const onednn::ConvSpec& s, std::vector<wino::PostOp> post)
      : shape_{s.n, s.c, s.h, s.w, s.out_channels, onednn::block_size(), at::get_num_threads()},
        post_(std::move(post)) {}
  onednn::Shape output() const override { return {shape_.n, shape_.k, shape_.h, shape_.w}; }
  size_t scratchpad_bytes() const override { return 0; }  // per-thread, kept by the kernel
  size_t packed_weights_bytes() const override {
    return wino::packed_weights_floats(shape_) * sizeof(float);
  }
  const std::string& implementation() const override {
    static const std::string name = "memoplan:winograd_f2x3:avx2";
    return name;
  }
  bool same_packing(const Conv& other) const override {
    const auto* o = dynamic_cast<const WinogradConv*>(&other);
    return o != nullptr && o->shape_.c == shape_.c && o->shape_.k == shape_.k &&
           o->shape_.block == shape_.block;
  }
  bool pack_weights(const float* weight, void* packed, const float* scales,
                    const RowsPacked& rows_packed) const override {
    wino::pack_weights(shape_, weight, static_cast<float*>(packed), scales);
    if (rows_packed) rows_packed(0, shape_.k);
    return true;
  }
  void run(const float* input, const void* packed_weights, const float* bias, const float* residual,
           float* output, void* /*scratchpad*/) const override {
    wino::run(shape_, input, static_cast<const float*>(packed_weights), bias, post_, residual,
              output, tuned::intra_op_parallel());
  }

 private:
  wino::Shape shape_;
  std::vector<wino::PostOp> post_;
};

// The Winograd post-ops of the spec's epilogue, or false where it has one Winograd lacks.
bool winograd_post(const onednn::ConvSpec& s, std::vector<wino::PostOp>* out) {
  for (const onednn::PostOp& op : s.post) {
    if (op.kind == onednn::kResidualAdd) {
      out->push_back({wino::PostOp::Kind::kResidual, 0.f, 0.f});
    } else if (op.kind == static_cast<int>(onednn::Eltwise::kRelu)) {
      out->push_back({wino::PostOp::Kind::kRelu, op.alpha, 0.f});
    } else if (op.kind == static_cast<int>(onednn::Eltwise::kClip)) {
      out->push_back({wino::PostOp::Kind::kClip, op.alpha, op.beta});
    } else {
      return false;
    }
  }
  return true;
}

// A 3x3 stride-1 convolution, blocked to blocked: where a Winograd algorithm may run.
bool winograd_shape(const onednn::ConvSpec& s) {
  return s.kh == 3 && s.kw == 3 && s.stride[0] == 1 && s.stride[1] == 1 && s.padding[0] == 1 &&
         s.padding[1] == 1 && s.dilation[0] == 1 && s.dilation[1] == 1 && s.groups == 1 &&
         s.input == onednn::Format::kBlocked && s.output == onednn::Format::kBlocked;
}

// oneDNN's Winograd for the spec, or null where it has none (or only its reference loop).
std::shared_ptr<const onednn::Conv> onednn_winograd(const onednn::ConvSpec& s) {
  onednn::ConvSpec w = s;
  w.winograd = true;
  try {
    std::shared_ptr<const onednn::Conv> c = onednn::conv(w);
    return c->implementation().find("wino") != std::string::npos ? c : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// Milliseconds of the fastest of three interleaved runs of each (a, b), on random operands.
std::pair<double, double> measure(const onednn::Conv& a, const onednn::Conv& b,
                                  const onednn::ConvSpec& s) {
  const onednn::Shape out = a.output();
  const int64_t cin = onednn::padded_channels(s.c), cout = onednn::padded_channels(out.c);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> input = random(s.n * cin * s.h * s.w);
  const std::vector<float> weight = random(s.out_channels * s.c * 9), bias = random(out.c);
  const std::vector<float> residual = random(out.n * cout * out.h * out.w);
  std::vector<float> output(residual.size());
  struct Operands {
    std::vector<unsigned char> packed, scratch;
  };
  auto operands = [&](const onednn::Conv& conv) {
    Operands o{std::vector<unsigned char>(conv.packed_weights_bytes()),
               std::vector<unsigned char>(std::max<size_t>(1, conv.scratchpad_bytes()))};
    // In chunks where the packer can (rows_packed given): oneDNN's Winograd reorder would hold
    // the whole slice transformed as its scratchpad, 4x the weight's bytes for its 4x3 layout.
    conv.pack_weights(weight.data(), o.packed.data(), nullptr, [](int64_t, int64_t) {});
    return o;
  };
  Operands oa = operands(a), ob = operands(b);
  auto run = [&](const onednn::Conv& conv, Operands& o) {
    conv.run(input.data(), o.packed.data(), bias.data(), residual.data(), output.data(),
             o.scratch.data());
  };
  // The tuned ops' interleaved measurement (an untimed call before each timed one).
  const tuned::Timing t = tuned::time_both([&] { run(a, oa); }, [&] { run(b, ob); }, 3);
  return {t.memoplan_ms, t.aten_ms};
}

struct Choice {
  std::shared_ptr<const onednn::Conv> conv;
  // Milliseconds measured (0: not a candidate, or not measured: WinogradChoice::kAlways).
  double winograd_ms = 0, onednn_winograd_ms = 0, direct_ms = 0;
  // A Winograd measured faster by kWinogradMinGain but refused for the bytes it would add.
  bool refused_for_bytes = false;
};
ChoiceCache<std::vector<int64_t>, Choice>& winograd_choices() {
  static auto* table = new ChoiceCache<std::vector<int64_t>, Choice>();
  return *table;
}

// A Winograd form of a 3x3 weight holds more than the direct packing (16/9 of it with 4x4 tiles,
// 4x with oneDNN's 6x6): it is taken over the direct kernels only where its measured gain pays for
// the bytes it adds to the model's weights (WinogradPrice). The rule: the op's time falls by at
// least kWinogradMinGain, and by at least `gain_per_share` times the share of the model's weight
// bytes the form adds. Under memory "min" that rate is 4 (a form that adds 1% to the weights must
// make its convolution 4% faster), else 1. resnet18 on a Zen 4 core: its three 512 -> 512 layers at
// 7x7 add 7.3 MiB each (16% of the weights) for 24% of their time; under "min" they stay on the
// direct kernels (21 MiB less resident, the pass 8% slower: 0.565 of stock's time against 0.52),
// under "offset" they keep their Winograd; every 64-, 128- and 256-channel one (0.3-4% each,
// 49-69% faster) keeps its Winograd under both. Without the model (no weight bytes) only the
// first condition applies.
constexpr double kWinogradMinGain = 0.10;
bool worth_its_bytes(double winograd_ms, double direct_ms, const onednn::Conv& winograd,
                     const onednn::Conv& direct, const WinogradPrice& price) {
  return winograd_pays(1.0 - winograd_ms / direct_ms,
                       static_cast<double>(winograd.packed_weights_bytes()) -
                           static_cast<double>(direct.packed_weights_bytes()),
                       price);
}

// The fastest of oneDNN's direct kernels (`direct`), its Winograd and memoplan's for `s`, as
// `setting` allows (a Winograd over the direct kernels only where worth_its_bytes).
// The spec a choice is measured on: `s` with at most the output channels whose weight fits in
// kMeasuredWeightBytes (a multiple of 16, the block), so the measurement's operands (a random
// weight and up to two packings of it, one 16/9 its size) never set the process's peak: a
// 512 -> 512 layer measured whole held 34-50 MiB at once. Each kernel's time is linear in the
// output channels; the choice compares two on the same slice.
constexpr int64_t kMeasuredWeightBytes = int64_t{4} << 20;
onednn::ConvSpec measured_spec(const onednn::ConvSpec& s) {
  onednn::ConvSpec m = s;
  const int64_t per_channel = s.c * 9 * static_cast<int64_t>(sizeof(float));
  const int64_t fit = kMeasuredWeightBytes / per_channel / 16 * 16;
  if (fit >= 16 && fit < s.out_channels) m.out_channels = fit;
  return m;
}

// memoplan's Winograd for `s`, or null where it has none.
std::shared_ptr<const onednn::Conv> memoplan_winograd(const onednn::ConvSpec& s) {
  std::vector<wino::PostOp> post;
  if (!wino::available(onednn::block_size()) || !winograd_post(s, &post)) return nullptr;
  return std::make_shared<const WinogradConv>(s, std::move(post));
}

// The fastest of oneDNN's direct kernels (`direct`), its Winograd and memoplan's for `s`, as
// `setting` allows (a Winograd over the direct kernels only where worth_its_bytes at `price`),
// measured on measured_spec(s).
Choice choose(const onednn::ConvSpec& s, WinogradChoice setting,
              const std::shared_ptr<const onednn::Conv>& direct, const WinogradPrice& price) {
  std::shared_ptr<const onednn::Conv> ours =
      setting == WinogradChoice::kMeasure || setting == WinogradChoice::kAlways
          ? memoplan_winograd(s)
          : nullptr;
  std::shared_ptr<const onednn::Conv> theirs =
      setting == WinogradChoice::kMeasure || setting == WinogradChoice::kOneDnn ? onednn_winograd(s)
                                                                                : nullptr;
  Choice choice{direct};
  if (setting == WinogradChoice::kAlways) {
    if (ours) choice.conv = ours;
    return choice;
  }
  if (setting == WinogradChoice::kOneDnn) {
    if (theirs) choice.conv = theirs;
    return choice;
  }
  // The same candidates on the measured slice (the full-size ones are only made, never run).
  const onednn::ConvSpec m = measured_spec(s);
  const bool sliced = m.out_channels != s.out_channels;
  const std::shared_ptr<const onednn::Conv> direct_m = sliced ? onednn::conv(m) : direct;
  const std::shared_ptr<const onednn::Conv> theirs_m = !theirs  ? nullptr
                                                       : sliced ? onednn_winograd(m)
                                                                : theirs;
  const std::shared_ptr<const onednn::Conv> ours_m = !ours    ? nullptr
                                                     : sliced ? memoplan_winograd(m)
                                                              : ours;
  // oneDNN's direct kernels against its Winograd, then the faster against memoplan's.
  std::shared_ptr<const onednn::Conv> best = direct, best_m = direct_m;
  if (theirs && theirs_m) {
    std::tie(choice.onednn_winograd_ms, choice.direct_ms) = measure(*theirs_m, *direct_m, m);
    if (worth_its_bytes(choice.onednn_winograd_ms, choice.direct_ms, *theirs, *direct, price)) {
      best = theirs;
      best_m = theirs_m;
    }
  }
  if (ours && ours_m) {
    double best_ms = 0;
    std::tie(choice.winograd_ms, best_ms) = measure(*ours_m, *best_m, m);
    if (best == direct) choice.direct_ms = best_ms;
    // Against oneDNN's Winograd: faster and no larger.
    const bool better = best == direct
                            ? worth_its_bytes(choice.winograd_ms, best_ms, *ours, *direct, price)
                            : choice.winograd_ms < best_ms &&
                                  ours->packed_weights_bytes() <= best->packed_weights_bytes();
    if (better) best = ours;
  }
  choice.conv = best;
  if (best == direct && choice.direct_ms > 0) {
    for (double ms : {choice.winograd_ms, choice.onednn_winograd_ms}) {
      // Taken on its speed alone (no price): refused for its bytes.
      if (ms > 0 && winograd_pays(1.0 - ms / choice.direct_ms, 0, {})) {
        choice.refused_for_bytes = true;
      }
    }
  }
  return choice;
}

}  // namespace

bool winograd_pays(double gain, double extra_bytes, const WinogradPrice& price) {
  if (!(gain >= kWinogradMinGain)) return false;
  if (price.model_weight_bytes == 0) return true;
  return gain >= price.gain_per_share * extra_bytes / static_cast<double>(price.model_weight_bytes);
}

WinogradPrice winograd_price(int64_t module) {
  const PlanOptions* options = runtime_pass::module_options(module);
  if (!options) return {};
  return {runtime_pass::module_weight_bytes(module), options->memory == Memory::kMin ? 4.0 : 1.0};
}

std::shared_ptr<const onednn::Conv> best_conv(const onednn::ConvSpec& s,
                                              const WinogradPrice& price) {
  const WinogradChoice setting = kernel_options().winograd;
  if (setting == WinogradChoice::kNever || !winograd_shape(s)) return onednn::conv(s);
  std::vector<int64_t> key = {s.n,
                              s.c,
                              s.h,
                              s.w,
                              s.out_channels,
                              at::get_num_threads(),
                              static_cast<int64_t>(setting),
                              static_cast<int64_t>(price.model_weight_bytes),
                              static_cast<int64_t>(price.gain_per_share * 1e6)};
  for (const onednn::PostOp& op : s.post) {
    key.push_back(op.kind);
    key.push_back(static_cast<int64_t>(op.alpha * 1e6f));
    key.push_back(static_cast<int64_t>(op.beta * 1e6f));
  }
  return winograd_choices()
      .decide(key,
              [&] {
                // The choice holds what it chose; oneDNN's cache may forget the direct kernels
                // made for it (a measurement's primitives: blocked_ops.cc).
                Choice choice = choose(s, setting, onednn::conv(s), price);
                budget::give_back_plain_weights();  // the measurement's operands, freed
                return choice;
              })
      .conv;
}

std::string winograd_report() {
  std::ostringstream out;
  winograd_choices().for_each([&](const std::vector<int64_t>& key, const Choice& choice) {
    out << "conv3x3 " << key[0] << "x" << key[1] << "x" << key[2] << "x" << key[3] << " -> "
        << key[4] << " threads " << key[5] << ": " << choice.conv->implementation();
    const char* sep = " (";
    for (const auto& [name, ms] : {std::pair<const char*, double>{"winograd", choice.winograd_ms},
                                   {"oneDNN winograd", choice.onednn_winograd_ms},
                                   {"oneDNN direct", choice.direct_ms}}) {
      if (ms <= 0) continue;
      out << sep << name << " " << ms << " ms";
      sep = ", ";
    }
    if (sep[0] == ',') out << ")";
    if (choice.refused_for_bytes) {
      out << ": a Winograd form's gain does not pay for the bytes it adds to the model's "
          << (key[7] >> 20) << " MiB of weights";
    }
    out << "\n";
  });
  return out.str();
}

namespace {
const bool winograd_report_registered =
    tuned::add_report(80, &winograd_report);  // kernel_report()'s order
}  // namespace

}  // namespace memoplan::torch_ext::blocked

// best_conv (winograd_conv.h): memoplan's Winograd convolution as an onednn::Conv, and the
// per-shape measurement against oneDNN's.
#include "winograd_conv.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "memoplan/kernels/winograd.h"
#include "memoplan/torch/kernels.h"
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
  std::string implementation() const override { return "memoplan:winograd_f2x3:avx2"; }
  bool same_packing(const Conv& other) const override {
    const auto* o = dynamic_cast<const WinogradConv*>(&other);
    return o != nullptr && o->shape_.c == shape_.c && o->shape_.k == shape_.k &&
           o->shape_.block == shape_.block;
  }
  void pack_weights(const float* weight, void* packed) const override {
    wino::pack_weights(shape_, weight, static_cast<float*>(packed));
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

// set_winograd(); MEMOPLAN_WINOGRAD=0 / =1 at start.
std::atomic<WinogradChoice>& mode() {
  static std::atomic<WinogradChoice> m{[] {
    const char* v = std::getenv("MEMOPLAN_WINOGRAD");
    if (!v) return WinogradChoice::kMeasure;
    return std::string(v) == "0" ? WinogradChoice::kNever : WinogradChoice::kAlways;
  }()};
  return m;
}

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

bool applies(const onednn::ConvSpec& s) {
  return s.kh == 3 && s.kw == 3 && s.stride[0] == 1 && s.stride[1] == 1 && s.padding[0] == 1 &&
         s.padding[1] == 1 && s.dilation[0] == 1 && s.dilation[1] == 1 && s.groups == 1 &&
         s.input == onednn::Format::kBlocked && s.output == onednn::Format::kBlocked &&
         wino::available(onednn::block_size());
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
    conv.pack_weights(weight.data(), o.packed.data());
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
  double winograd_ms = 0, direct_ms = 0;  // 0: not measured (MEMOPLAN_WINOGRAD=1)
};
std::mutex choices_mutex;
std::map<std::vector<int64_t>, Choice>& choices() {
  static auto* table = new std::map<std::vector<int64_t>, Choice>();  // used at exit
  return *table;
}

}  // namespace

std::shared_ptr<const onednn::Conv> best_conv(const onednn::ConvSpec& s) {
  std::shared_ptr<const onednn::Conv> direct = onednn::conv(s);
  std::vector<wino::PostOp> post;
  const WinogradChoice setting = mode().load();
  if (setting == WinogradChoice::kNever || !applies(s) || !winograd_post(s, &post)) return direct;
  std::vector<int64_t> key = {
      s.n, s.c, s.h, s.w, s.out_channels, at::get_num_threads(), static_cast<int64_t>(setting)};
  for (const onednn::PostOp& op : s.post) {
    key.push_back(op.kind);
    key.push_back(static_cast<int64_t>(op.alpha * 1e6f));
    key.push_back(static_cast<int64_t>(op.beta * 1e6f));
  }
  std::lock_guard<std::mutex> lock(choices_mutex);
  if (auto it = choices().find(key); it != choices().end()) return it->second.conv;
  auto winograd = std::make_shared<const WinogradConv>(s, std::move(post));
  Choice choice{winograd};
  if (setting == WinogradChoice::kMeasure) {
    std::tie(choice.winograd_ms, choice.direct_ms) = measure(*winograd, *direct, s);
    if (choice.direct_ms <= choice.winograd_ms) choice.conv = direct;
  }
  return choices().emplace(key, choice).first->second.conv;
}

std::string winograd_report() {
  std::ostringstream out;
  std::lock_guard<std::mutex> lock(choices_mutex);
  for (const auto& [key, choice] : choices()) {
    out << "conv3x3 " << key[0] << "x" << key[1] << "x" << key[2] << "x" << key[3] << " -> "
        << key[4] << " threads " << key[5] << ": " << choice.conv->implementation();
    if (choice.winograd_ms > 0) {
      out << " (winograd " << choice.winograd_ms << " ms, oneDNN direct " << choice.direct_ms
          << " ms)";
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace memoplan::torch_ext::blocked

namespace memoplan::torch_ext {

WinogradChoice set_winograd(WinogradChoice choice) { return blocked::mode().exchange(choice); }

}  // namespace memoplan::torch_ext

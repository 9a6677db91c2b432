// What the blocked-layout tests share: the blocks of the CNNs the issue names, written as
// torchvision scripts them (blocks()), and the check of a planned copy against aten's results.
#pragma once

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>
#include <string>

#include "memoplan/torch/plan.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext::blocked_test {

using testing::BlockedLayoutGuard;
using testing::relative_difference;
using testing::tuned;

inline void add_conv(torch::jit::Module& m, const std::string& name, int64_t out, int64_t in,
                     int64_t k, bool bias = false) {
  m.register_parameter(name, torch::randn({out, in, k, k}) * (1.0 / std::sqrt(in * k * k)), false);
  if (bias) m.register_parameter(name + "_b", torch::randn({out}) * 0.1, false);
}

inline void add_bn(torch::jit::Module& m, const std::string& name, int64_t c) {
  m.register_parameter(name + "_w", torch::rand({c}) + 0.5, false);
  m.register_parameter(name + "_b", torch::randn({c}) * 0.1, false);
  m.register_buffer(name + "_m", torch::randn({c}) * 0.1);
  m.register_buffer(name + "_v", torch::rand({c}) + 0.5);
}

// Every block of the issue's CNNs in one module.
inline torch::jit::Module blocks() {
  torch::manual_seed(3);
  torch::jit::Module m("Blocks");
  add_conv(m, "stem", 32, 3, 3);
  add_bn(m, "stem_bn", 32);
  add_conv(m, "c1", 32, 32, 3);  // ResNet basic block
  add_bn(m, "bn1", 32);
  add_conv(m, "c2", 32, 32, 3);
  add_bn(m, "bn2", 32);
  add_conv(m, "expand", 72, 32, 1);  // MobileNetV2: expand, depthwise (ReLU6), project to 24
  add_bn(m, "bn3", 72);
  add_conv(m, "dw", 72, 1, 3);
  add_bn(m, "bn4", 72);
  add_conv(m, "project", 24, 72, 1);
  add_bn(m, "bn5", 24);
  add_conv(m, "expand2", 24, 24, 1);  // a residual of 24 channels
  add_bn(m, "bn6", 24);
  add_conv(m, "se1", 8, 24, 1, true);  // MobileNetV3 squeeze-excitation, hardswish
  add_conv(m, "se2", 24, 8, 1, true);
  add_conv(m, "dw2", 24, 1, 5);
  add_bn(m, "bn7", 24);
  add_conv(m, "se3", 6, 24, 1, true);  // EfficientNet: SiLU, sigmoid gate, stochastic depth
  add_conv(m, "se4", 24, 6, 1, true);
  add_conv(m, "head", 40, 24, 1);
  m.register_parameter("fc", torch::randn({10, 40}) * 0.1, false);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.define(R"(
    def bn(self, x, w, b, mean, var):
        return torch.batch_norm(x, w, b, mean, var, self.training, 0.1, 1e-5, False)

    def forward(self, x):
        h = torch.relu_(self.bn(torch.conv2d(x, self.stem, None, [2, 2], [1, 1]), self.stem_bn_w, self.stem_bn_b, self.stem_bn_m, self.stem_bn_v))
        h = torch.max_pool2d(h, [3, 3], [2, 2], [1, 1], [1, 1], True)
        identity = h
        out = torch.relu(self.bn(torch.conv2d(h, self.c1, None, [1, 1], [1, 1]), self.bn1_w, self.bn1_b, self.bn1_m, self.bn1_v))
        out = self.bn(torch.conv2d(out, self.c2, None, [1, 1], [1, 1]), self.bn2_w, self.bn2_b, self.bn2_m, self.bn2_v)
        out += identity
        h = torch.relu(out)
        e = torch.hardtanh(self.bn(torch.conv2d(h, self.expand), self.bn3_w, self.bn3_b, self.bn3_m, self.bn3_v), 0.0, 6.0)
        e = torch.hardtanh_(self.bn(torch.conv2d(e, self.dw, None, [1, 1], [1, 1], [1, 1], 72), self.bn4_w, self.bn4_b, self.bn4_m, self.bn4_v), 0.0, 6.0)
        p = self.bn(torch.conv2d(e, self.project), self.bn5_w, self.bn5_b, self.bn5_m, self.bn5_v)
        q = torch.hardswish(self.bn(torch.conv2d(p, self.expand2), self.bn6_w, self.bn6_b, self.bn6_m, self.bn6_v))
        s = torch.adaptive_avg_pool2d(q, [1, 1])
        s = torch.hardsigmoid(torch.conv2d(torch.relu(torch.conv2d(s, self.se1, self.se1_b)), self.se2, self.se2_b))
        q = s * q
        r = p + q
        d = torch.silu(self.bn(torch.conv2d(r, self.dw2, None, [1, 1], [2, 2], [1, 1], 24), self.bn7_w, self.bn7_b, self.bn7_m, self.bn7_v))
        g = torch.sigmoid(torch.conv2d(torch.silu(torch.conv2d(torch.adaptive_avg_pool2d(d, [1, 1]), self.se3, self.se3_b)), self.se4, self.se4_b))
        d = d * g
        if self.training:
            d = d * torch.bernoulli(torch.full([d.size(0), 1, 1, 1], 0.8)) / 0.8
        r = d + r
        t = torch.avg_pool2d(r, [2, 2], [2, 2], [0, 0], False, False)
        u = torch.relu(torch.conv2d(t, self.head))
        feature = torch.flatten(torch.adaptive_avg_pool2d(u, [1, 1]), 1)
        return torch.linear(feature, self.fc), u
  )");
  m.eval();
  return m;
}

inline void expect_close(const c10::IValue& got, const c10::IValue& want, const std::string& what) {
  const auto g = got.toTuple()->elements();
  const auto w = want.toTuple()->elements();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const at::Tensor a = g[i].toTensor(), b = w[i].toTensor();
    ASSERT_EQ(a.sizes(), b.sizes()) << what;
    EXPECT_LT(relative_difference(a, b), 1e-5) << "output " << i << ", " << what;
    EXPECT_TRUE(a.is_contiguous()) << "output " << i << " left the region blocked, " << what;
  }
}

// The CPU's features, never the product's own report: on a CPU that has them, a blocked path
// switched off fails the tests below (their checks of the report) instead of skipping them.
inline bool blocked_layout_here() { return testing::onednn_off_here().empty(); }

inline void check_blocks(const at::Tensor& x, int threads) {
  at::set_num_threads(threads);
  torch::jit::Module reference = blocks(), planned = blocks();
  c10::InferenceMode guard;
  const c10::IValue expected = reference.forward({x});
  const PlanSummary summary = plan(planned, {x}, tuned());
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 3; ++pass) {
    expect_close(planned.forward({x}), expected,
                 "pass " + std::to_string(pass) + ", input " + c10::str(x.sizes()) + ", " +
                     std::to_string(threads) + " threads");
  }
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.planned_hits, 3 * summary.planned_tensors);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
  at::set_num_threads(1);
}

}  // namespace memoplan::torch_ext::blocked_test

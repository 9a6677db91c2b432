// Memory "min"'s dense-layer bottleneck (tuned/bn_relu_conv1x1.h): the fused op gives the bytes of
// aten's batch norm + ReLU + 1x1 convolution for every shape, in bands where aten runs OpenBLAS
// GEMMs (one thread), whole elsewhere; the graph rewrite takes only chains whose input is read
// again afterwards.
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/script.h>

#include <cstring>
#include <memory>
#include <vector>

#include "bn_relu_conv1x1.h"
#include "memoplan/torch/kernels.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

using testing::same_bytes;
using testing::thread_counts;

// The bands need OpenBLAS's level-3 driver (its blocking is learned from it).
bool openblas() { return dlsym(RTLD_DEFAULT, "openblas_get_config") != nullptr; }

struct Case {
  std::vector<int64_t> input;  // N, C, H, W
  int64_t out_channels;
  bool affine;  // batch norm weight and bias (else None)
  bool banded;  // at one thread under OpenBLAS, computed in bands
};

TEST(BnReluConv1x1, GivesAtensBytesInBandsAtOneThread) {
  c10::InferenceMode guard;
  const std::vector<Case> cases = {
      {{1, 224, 56, 56}, 128, true, true},  // densenet121's widest block-1 bottleneck
      {{2, 96, 56, 56}, 128, true, true},   // two images
      {{1, 160, 61, 59}, 32, false, true},  // odd sizes, no affine parameters
      {{1, 64, 14, 14}, 128, true, false},  // too small to be worth bands
  };
  const auto op = torch::jit::findOperatorFor(c10::OperatorName("memoplan::bn_relu_conv1x1", ""));
  ASSERT_NE(op, nullptr);
  const int saved = at::get_num_threads();
  for (const int threads : thread_counts()) {
    at::set_num_threads(threads);
    for (const Case& c : cases) {
      const int64_t channels = c.input[1];
      const at::Tensor x = at::randn(c.input);
      const at::Tensor weight = at::randn({c.out_channels, channels, 1, 1});
      const c10::optional<at::Tensor> gamma =
          c.affine ? c10::optional<at::Tensor>(at::randn({channels})) : c10::nullopt;
      const c10::optional<at::Tensor> beta =
          c.affine ? c10::optional<at::Tensor>(at::randn({channels})) : c10::nullopt;
      const at::Tensor mean = at::randn({channels}), var = at::rand({channels}).add_(0.2);
      at::Tensor expected = at::batch_norm(x, gamma, beta, mean, var, false, 0.1, 1e-5, false);
      expected = at::conv2d(expected.relu_(), weight);

      const uint64_t before = sliced_counts().convolutions;
      torch::jit::Stack stack{x,
                              gamma,
                              beta,
                              mean,
                              var,
                              false,
                              0.1,
                              1e-5,
                              false,
                              weight,
                              c10::IValue(),
                              std::vector<int64_t>{1, 1},
                              std::vector<int64_t>{0, 0},
                              std::vector<int64_t>{1, 1},
                              int64_t{1}};
      op->getOperation()(stack);
      ASSERT_EQ(stack.size(), 1u);
      EXPECT_TRUE(same_bytes(stack[0].toTensor(), expected))
          << "threads " << threads << " input " << c.input[0] << "x" << channels << "x"
          << c.input[2] << "x" << c.input[3];
      // At two threads aten runs oneDNN: the op is batch norm, ReLU and conv2d_sliced, whose
      // parts count too.
      if (threads == 1) {
        EXPECT_EQ(sliced_counts().convolutions - before, c.banded && openblas() ? 1u : 0u)
            << "channels " << channels;
      }
    }
  }
  at::set_num_threads(saved);
}

// x -> batch norm -> relu_ -> 1x1 convolution; `kept` returns x too (read after the chain).
std::shared_ptr<torch::jit::Graph> chain(bool kept) {
  auto graph = std::make_shared<torch::jit::Graph>();
  const std::string ir = std::string(R"IR(
graph(%x : Tensor, %w : Tensor, %g : Tensor, %b : Tensor, %m : Tensor, %v : Tensor):
  %no : bool = prim::Constant[value=0]()
  %momentum : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1.0000000000000001e-05]()
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %ones : int[] = prim::ListConstruct(%one, %one)
  %zeros : int[] = prim::ListConstruct(%zero, %zero)
  %n : Tensor = aten::batch_norm(%x, %g, %b, %m, %v, %no, %momentum, %eps, %no)
  %r : Tensor = aten::relu_(%n)
  %y : Tensor = aten::conv2d(%r, %w, %none, %ones, %zeros, %ones, %one)
)IR") + (kept ? "  %t : (Tensor, Tensor) = prim::TupleConstruct(%y, %x)\n  return (%t)\n"
              : "  return (%y)\n");
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

TEST(BnReluConv1x1, FusesOnlyChainsWhoseInputIsReadAgain) {
  c10::InferenceMode guard;
  std::shared_ptr<torch::jit::Graph> alone = chain(false);
  EXPECT_EQ(fuse_bn_relu_conv1x1(*alone), 0);  // its input dies at the batch norm

  std::shared_ptr<torch::jit::Graph> kept = chain(true);
  const std::shared_ptr<torch::jit::Graph> original = kept->copy();
  ASSERT_EQ(fuse_bn_relu_conv1x1(*kept), 1);
  int fused = 0, stock = 0;
  for (const torch::jit::Node* node : kept->nodes()) {
    fused += node->kind().toQualString() == std::string("memoplan::bn_relu_conv1x1");
    stock += node->kind() == c10::aten::batch_norm || node->kind() == c10::aten::relu_ ||
             node->kind() == c10::aten::conv2d;
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(stock, 0);

  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const torch::jit::Stack inputs{at::randn({1, 192, 56, 56}),
                                 at::randn({128, 192, 1, 1}),
                                 at::randn({192}),
                                 at::randn({192}),
                                 at::randn({192}),
                                 at::rand({192}).add_(0.2)};
  torch::jit::Stack a = inputs, b = inputs;
  torch::jit::GraphExecutor(original, "original").run(a);
  torch::jit::GraphExecutor(kept, "fused").run(b);
  at::set_num_threads(saved);
  const auto ta = a.at(0).toTuple(), tb = b.at(0).toTuple();
  EXPECT_TRUE(same_bytes(ta->elements()[0].toTensor(), tb->elements()[0].toTensor()));
}

}  // namespace
}  // namespace memoplan::torch_ext

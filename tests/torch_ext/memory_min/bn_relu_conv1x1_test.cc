// Memory "min"'s dense-layer bottleneck (memory_min/bn_relu_conv1x1.h): the fused op gives the
// bytes of aten's batch norm + ReLU + 1x1 convolution for every shape, in bands where aten runs
// OpenBLAS GEMMs (one thread), whole elsewhere; the graph rewrite takes only chains whose input is
// read again afterwards.
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/script.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "bn_relu_conv1x1.h"
#include "memoplan/torch/memory_min.h"
#include "tuned/tuned_test_support.h"

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

// The op's arguments after its input (batch norm's, then the 1x1 convolution's).
void push_rest(torch::jit::Stack& stack, const c10::optional<at::Tensor>& gamma,
               const c10::optional<at::Tensor>& beta, const at::Tensor& mean, const at::Tensor& var,
               const at::Tensor& weight) {
  for (c10::IValue v : {c10::IValue(gamma), c10::IValue(beta), c10::IValue(mean), c10::IValue(var),
                        c10::IValue(false), c10::IValue(0.1), c10::IValue(1e-5), c10::IValue(false),
                        c10::IValue(weight), c10::IValue(), c10::IValue(std::vector<int64_t>{1, 1}),
                        c10::IValue(std::vector<int64_t>{0, 0}),
                        c10::IValue(std::vector<int64_t>{1, 1}), c10::IValue(int64_t{1})}) {
    stack.push_back(std::move(v));
  }
}

// Both forms: the input whole (bn_relu_conv1x1) and as a concatenation's inputs, the channels in
// three parts (cat_bn_relu_conv1x1), against aten's cat + batch norm + ReLU + convolution.
TEST(BnReluConv1x1, GivesAtensBytesInBandsAtOneThread) {
  c10::InferenceMode guard;
  const std::vector<Case> cases = {
      {{1, 224, 56, 56}, 128, true, true},  // densenet121's widest block-1 bottleneck
      {{2, 96, 56, 56}, 128, true, true},   // two images
      {{1, 160, 61, 59}, 32, false, true},  // odd sizes, no affine parameters
      {{1, 64, 14, 14}, 128, true, false},  // too small to be worth bands
  };
  const auto op = torch::jit::findOperatorFor(c10::OperatorName("memoplan::bn_relu_conv1x1", ""));
  const auto cat_op =
      torch::jit::findOperatorFor(c10::OperatorName("memoplan::cat_bn_relu_conv1x1", ""));
  ASSERT_NE(op, nullptr);
  ASSERT_NE(cat_op, nullptr);
  const int saved = at::get_num_threads();
  for (const int threads : thread_counts()) {
    at::set_num_threads(threads);
    for (const Case& c : cases) {
      const int64_t channels = c.input[1];
      const at::Tensor x = at::randn(c.input);
      const std::vector<at::Tensor> parts = {x.narrow(1, 0, 32).contiguous(),
                                             x.narrow(1, 32, 16).contiguous(),
                                             x.narrow(1, 48, channels - 48).contiguous()};
      const at::Tensor weight = at::randn({c.out_channels, channels, 1, 1});
      const c10::optional<at::Tensor> gamma =
          c.affine ? c10::optional<at::Tensor>(at::randn({channels})) : c10::nullopt;
      const c10::optional<at::Tensor> beta =
          c.affine ? c10::optional<at::Tensor>(at::randn({channels})) : c10::nullopt;
      const at::Tensor mean = at::randn({channels}), var = at::rand({channels}).add_(0.2);
      at::Tensor expected =
          at::batch_norm(at::cat(parts, 1), gamma, beta, mean, var, false, 0.1, 1e-5, false);
      expected = at::conv2d(expected.relu_(), weight);

      for (const bool concatenated : {false, true}) {
        const uint64_t before = sliced_counts().convolutions;
        torch::jit::Stack stack;
        if (concatenated) {
          stack.push_back(c10::List<at::Tensor>(parts));
          stack.push_back(int64_t{1});
        } else {
          stack.push_back(x);
        }
        push_rest(stack, gamma, beta, mean, var, weight);
        (concatenated ? cat_op : op)->getOperation()(stack);
        ASSERT_EQ(stack.size(), 1u);
        EXPECT_TRUE(same_bytes(stack[0].toTensor(), expected))
            << "threads " << threads << " concatenated " << concatenated << " input " << c.input[0]
            << "x" << channels << "x" << c.input[2] << "x" << c.input[3];
        // At two threads aten runs oneDNN: the op is batch norm, ReLU and conv2d_sliced, whose
        // parts count too.
        if (threads == 1) {
          EXPECT_EQ(sliced_counts().convolutions - before, c.banded && openblas() ? 1u : 0u)
              << "channels " << channels << " concatenated " << concatenated;
        }
      }
    }
  }
  at::set_num_threads(saved);
}

// The constants both graphs below use: batch norm's flags, the 1x1 convolution's arguments.
const char* const kConstants = R"IR(
  %no : bool = prim::Constant[value=0]()
  %momentum : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1.0000000000000001e-05]()
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %ones : int[] = prim::ListConstruct(%one, %one)
  %zeros : int[] = prim::ListConstruct(%zero, %zero)
)IR";

// x -> batch norm -> relu_ -> 1x1 convolution; `kept` returns x too (read after the chain).
std::shared_ptr<torch::jit::Graph> chain(bool kept) {
  auto graph = std::make_shared<torch::jit::Graph>();
  const std::string ir =
      "graph(%x : Tensor, %w : Tensor, %g : Tensor, %b : Tensor, %m : Tensor, %v : Tensor):" +
      std::string(kConstants) +
      R"IR(  %n : Tensor = aten::batch_norm(%x, %g, %b, %m, %v, %no, %momentum, %eps, %no)
  %r : Tensor = aten::relu_(%n)
  %y : Tensor = aten::conv2d(%r, %w, %none, %ones, %zeros, %ones, %one)
)IR" +
      std::string(kept ? "  %t : (Tensor, Tensor) = prim::TupleConstruct(%y, %x)\n  return (%t)\n"
                       : "  return (%y)\n");
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

// [x, y] -> cat -> batch norm -> relu -> 1x1 convolution, the concatenation's rank and sizes read
// (as batch norm's checks do), the list returned too (read after the chain).
std::shared_ptr<torch::jit::Graph> concat_chain() {
  auto graph = std::make_shared<torch::jit::Graph>();
  const std::string ir =
      "graph(%x : Tensor, %y : Tensor, %w : Tensor, %g : Tensor, %b : Tensor, %m : Tensor, "
      "%v : Tensor):" +
      std::string(kConstants) + R"IR(  %list : Tensor[] = prim::ListConstruct(%x, %y)
  %c : Tensor = aten::cat(%list, %one)
  %rank : int = aten::dim(%c)
  %sizes : int[] = aten::size(%c)
  %n : Tensor = aten::batch_norm(%c, %g, %b, %m, %v, %no, %momentum, %eps, %no)
  %r : Tensor = aten::relu(%n)
  %out : Tensor = aten::conv2d(%r, %w, %none, %ones, %zeros, %ones, %one)
  %t : (Tensor, int, int[], Tensor[]) = prim::TupleConstruct(%out, %rank, %sizes, %list)
  return (%t)
)IR";
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

// How many nodes of `graph` are `fused_kind`, and how many are of the ops it replaced.
std::pair<int, int> count_nodes(const torch::jit::Graph& graph, const char* fused_kind) {
  int fused = 0, stock = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    fused += node->kind().toQualString() == std::string(fused_kind);
    stock += node->kind() == c10::aten::cat || node->kind() == c10::aten::batch_norm ||
             node->kind() == c10::aten::relu || node->kind() == c10::aten::relu_ ||
             node->kind() == c10::aten::conv2d;
  }
  return {fused, stock};
}

// Runs both graphs on `inputs`; their tuples' elements.
std::pair<std::vector<c10::IValue>, std::vector<c10::IValue>> run_both(
    const std::shared_ptr<torch::jit::Graph>& original,
    const std::shared_ptr<torch::jit::Graph>& fused, const torch::jit::Stack& inputs) {
  torch::jit::Stack a = inputs, b = inputs;
  torch::jit::GraphExecutor(original, "original").run(a);
  torch::jit::GraphExecutor(fused, "fused").run(b);
  return {a.at(0).toTupleRef().elements().vec(), b.at(0).toTupleRef().elements().vec()};
}

TEST(BnReluConv1x1, FusesAConcatenationIntoTheOpAndKeepsItsShapeChecks) {
  c10::InferenceMode guard;
  std::shared_ptr<torch::jit::Graph> graph = concat_chain();
  const std::shared_ptr<torch::jit::Graph> original = graph->copy();
  ASSERT_EQ(fuse_bn_relu_conv1x1(*graph), 1);
  EXPECT_EQ(count_nodes(*graph, "memoplan::cat_bn_relu_conv1x1"), std::make_pair(1, 0));
  const int saved = at::get_num_threads();
  for (const int threads : thread_counts()) {
    at::set_num_threads(threads);
    for (const int64_t images : {1, 2}) {
      const torch::jit::Stack inputs{at::randn({images, 96, 56, 56}),
                                     at::randn({images, 64, 56, 56}),
                                     at::randn({128, 160, 1, 1}),
                                     at::randn({160}),
                                     at::randn({160}),
                                     at::randn({160}),
                                     at::rand({160}).add_(0.2)};
      const auto [want, got] = run_both(original, graph, inputs);
      EXPECT_TRUE(same_bytes(want[0].toTensor(), got[0].toTensor()))
          << "threads " << threads << " images " << images;
      EXPECT_EQ(want[1].toInt(), got[1].toInt());
      EXPECT_EQ(want[2].toIntVector(), got[2].toIntVector());
    }
  }
  at::set_num_threads(saved);
}

TEST(BnReluConv1x1, FusesOnlyChainsWhoseInputIsReadAgain) {
  c10::InferenceMode guard;
  std::shared_ptr<torch::jit::Graph> alone = chain(false);
  EXPECT_EQ(fuse_bn_relu_conv1x1(*alone), 0);  // its input dies at the batch norm

  std::shared_ptr<torch::jit::Graph> kept = chain(true);
  const std::shared_ptr<torch::jit::Graph> original = kept->copy();
  ASSERT_EQ(fuse_bn_relu_conv1x1(*kept), 1);
  EXPECT_EQ(count_nodes(*kept, "memoplan::bn_relu_conv1x1"), std::make_pair(1, 0));

  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const torch::jit::Stack inputs{at::randn({1, 192, 56, 56}),
                                 at::randn({128, 192, 1, 1}),
                                 at::randn({192}),
                                 at::randn({192}),
                                 at::randn({192}),
                                 at::rand({192}).add_(0.2)};
  const auto [want, got] = run_both(original, kept, inputs);
  at::set_num_threads(saved);
  EXPECT_TRUE(same_bytes(want[0].toTensor(), got[0].toTensor()));
}

// Traced DenseNet: each dense layer concatenates a list of its own, made of every earlier layer's
// features; the list dies at its concatenation, its tensors are read by the next layer's list.
// That chain is fused, as scripted DenseNet's (one list, appended to) is; a transition's
// concatenation, whose tensors die with it, is not.
TEST(BnReluConv1x1, FusesATracedDenseLayerWhoseTensorsAreReadLater) {
  const std::string ir =
      "graph(%x : Tensor, %y : Tensor, %w : Tensor, %g : Tensor, %b : Tensor, %m : Tensor, "
      "%v : Tensor, %w2 : Tensor):" +
      std::string(kConstants) + R"IR(  %list : Tensor[] = prim::ListConstruct(%x, %y)
  %c : Tensor = aten::cat(%list, %one)
  %n : Tensor = aten::batch_norm(%c, %g, %b, %m, %v, %no, %momentum, %eps, %no)
  %r : Tensor = aten::relu_(%n)
  %out : Tensor = aten::conv2d(%r, %w, %none, %ones, %zeros, %ones, %one)
  %later : Tensor[] = prim::ListConstruct(%x, %y, %out)
  %c2 : Tensor = aten::cat(%later, %one)
  %n2 : Tensor = aten::batch_norm(%c2, %w2, %w2, %w2, %w2, %no, %momentum, %eps, %no)
  %r2 : Tensor = aten::relu_(%n2)
  %out2 : Tensor = aten::conv2d(%r2, %w, %none, %ones, %zeros, %ones, %one)
  return (%out2)
)IR";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  // The first chain only: the second concatenation's tensors are read by nothing after it.
  EXPECT_EQ(fuse_bn_relu_conv1x1(*graph), 1);
  int fused = 0, batch_norms = 0;
  for (const torch::jit::Node* node : graph->nodes()) {
    fused += node->kind().toQualString() == std::string("memoplan::cat_bn_relu_conv1x1");
    batch_norms += node->kind() == c10::aten::batch_norm;
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(batch_norms, 1);
}

}  // namespace
}  // namespace memoplan::torch_ext

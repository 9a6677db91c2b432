// The canonical-forms pass (canonical_forms.h) on the graph forms torch.jit.trace makes: every
// aten::_convolution that is one becomes conv1d/2d/3d or conv_transpose1d/2d/3d computing the same
// bits; one whose flags are not constants stays; and a traced convolution net planned with the
// tuned kernels gets memoplan's convolutions, as the scripted one does.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include "attribute_constants.h"
#include "budget_api.h"  // module_id
#include "canonical_forms.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "settings_guard.h"
#include "tuned_test_support.h"

namespace memoplan::torch_ext {
namespace {

int count(const torch::jit::Graph& graph, const char* kind) {
  return testing::count_in_blocks(graph.block(), kind);
}

// What torch.jit.trace records for nn.Conv1d/2d/3d and nn.ConvTranspose2d: aten::_convolution
// with every flag a constant (the cuDNN ones as a user's torch.backends left them).
torch::jit::Module traced_convolutions() {
  torch::manual_seed(5);
  torch::jit::Module m("Traced");
  m.register_parameter("w1", torch::randn({6, 4, 3}), false);
  m.register_parameter("w2", torch::randn({8, 2, 3, 3}), false);  // groups 2
  m.register_parameter("b2", torch::randn({8}), false);
  m.register_parameter("w3", torch::randn({4, 8, 1, 3, 3}), false);
  m.register_parameter("wt", torch::randn({8, 3, 4, 4}), false);
  m.define(R"(
    def forward(self, x):
        a = torch._convolution(x, self.w2, self.b2, [2, 1], [1, 1], [1, 1], False, [0, 0], 2, False, True, True, True)
        b = torch._convolution(a, self.wt, None, [2, 2], [1, 1], [1, 1], True, [1, 0], 1, True, False, True, True)
        c = torch._convolution(a.unsqueeze(2), self.w3, None, [1, 1, 1], [0, 1, 1], [1, 1, 1], False, [0, 0, 0], 1, False, False, False, False)
        d = torch._convolution(x.flatten(2)[:, :, :16], self.w1, None, [1], [0], [2], False, [0], 1, False, False, True, True)
        return torch.relu(a), b, c, d
  )");
  m.eval();
  return m;
}

std::shared_ptr<torch::jit::Graph> forward_graph(torch::jit::Module& m) {
  return torch::jit::toGraphFunction(m.get_method("forward").function()).graph()->copy();
}

TEST(CanonicalForms, TracedConvolutionsBecomeTheirPublicOps) {
  torch::jit::Module m = traced_convolutions();
  std::shared_ptr<torch::jit::Graph> graph = forward_graph(m);
  ASSERT_EQ(count(*graph, "aten::_convolution"), 4);
  const CanonicalForms done = canonicalize(graph);
  EXPECT_EQ(done.convolutions, 4);
  EXPECT_EQ(done.left_as_is, 0);
  EXPECT_EQ(count(*graph, "aten::_convolution"), 0);
  EXPECT_EQ(count(*graph, "aten::conv2d"), 1);
  EXPECT_EQ(count(*graph, "aten::conv_transpose2d"), 1);
  EXPECT_EQ(count(*graph, "aten::conv3d"), 1);
  EXPECT_EQ(count(*graph, "aten::conv1d"), 1);
  graph->lint();
}

// A flag that is not a constant: the pass cannot tell the op, so it leaves it.
TEST(CanonicalForms, AConvolutionWhoseFlagsAreNotConstantsStays) {
  const std::string ir = R"IR(
graph(%x : Tensor, %w : Tensor, %transposed : bool):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %false : bool = prim::Constant[value=0]()
  %ones : int[] = prim::ListConstruct(%one, %one)
  %zeros : int[] = prim::ListConstruct(%zero, %zero)
  %y : Tensor = aten::_convolution(%x, %w, %none, %ones, %zeros, %ones, %transposed, %zeros, %one, %false, %false, %false, %false)
  return (%y))IR";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  const CanonicalForms done = canonicalize(graph);
  EXPECT_EQ(done.convolutions, 0);
  EXPECT_EQ(done.left_as_is, 1);
  EXPECT_EQ(count(*graph, "aten::_convolution"), 1);
}

// A scripted DenseNet block's `features`: a list grown by append, read by a concatenation before
// and after each append. Each concatenation gets a list of its own, holding what the list held
// there; the appends go.
TEST(CanonicalForms, AListGrownByAppendBecomesOneListPerConcatenation) {
  const std::string ir = R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor):
  %one : int = prim::Constant[value=1]()
  %features : Tensor[] = prim::ListConstruct(%a)
  %x : Tensor = aten::cat(%features, %one)
  %1 : Tensor[] = aten::append(%features, %b)
  %y : Tensor = aten::cat(%features, %one)
  %2 : Tensor[] = aten::append(%features, %c)
  %z : Tensor = aten::stack(%features, %one)
  return (%x, %y, %z))IR";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  torch::jit::Stack inputs = {torch::randn({2, 3}), torch::randn({2, 3}), torch::randn({2, 3})};
  torch::jit::Stack expected = inputs;
  torch::jit::GraphExecutor(graph->copy(), "").run(expected);
  const CanonicalForms done = canonicalize(graph);
  graph->lint();
  EXPECT_EQ(done.appended_lists, 1);
  EXPECT_EQ(count(*graph, "aten::append"), 0);
  std::vector<size_t> sizes;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::ListConstruct) continue;
    EXPECT_EQ(node->output()->uses().size(), 1u);
    sizes.push_back(node->inputs().size());
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{1, 2, 3}));
  torch::jit::Stack got = inputs;
  torch::jit::GraphExecutor(graph, "").run(got);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i].toTensor(), expected[i].toTensor())) << "output " << i;
  }
}

// A list read some other way (its length; the list itself returned) may be seen between the
// appends: it stays as it is.
TEST(CanonicalForms, AListReadOtherwiseKeepsItsAppends) {
  for (const char* other :
       {"%n : int = aten::len(%features)\n  return (%y, %n)", "return (%y, %features)"}) {
    const std::string ir = std::string(R"IR(
graph(%a : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %features : Tensor[] = prim::ListConstruct(%a)
  %1 : Tensor[] = aten::append(%features, %b)
  %y : Tensor = aten::cat(%features, %one)
  )IR") + other;
    auto graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(ir, graph.get());
    const CanonicalForms done = canonicalize(graph);
    EXPECT_EQ(done.appended_lists, 0) << other;
    EXPECT_EQ(count(*graph, "aten::append"), 1) << other;
  }
}

void expect_same_bits(const c10::IValue& got, const c10::IValue& want) {
  const auto g = got.toTuple()->elements();
  const auto w = want.toTuple()->elements();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_TRUE(torch::equal(g[i].toTensor(), w[i].toTensor())) << "output " << i;
  }
}

// plan() canonicalizes under every option set: the stock plan and memory min give the unplanned
// bits.
TEST(CanonicalForms, PlannedTracedConvolutionsGiveTheSameBits) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({2, 4, 9, 11});
  for (const Memory memory : {Memory::kOffset, Memory::kMin}) {
    torch::jit::Module reference = traced_convolutions();
    torch::jit::Module planned = traced_convolutions();
    const c10::IValue expected = reference.forward({x});
    PlanOptions options;
    options.memory = memory;
    plan(planned, {x}, options);
    for (int pass = 0; pass < 3; ++pass) expect_same_bits(planned.forward({x}), expected);
  }
}

// A traced ResNet-style block (convolution, batch norm, in-place ReLU, in-place residual add, as
// torch.jit.trace records nn.Conv2d, nn.BatchNorm2d and nn.ReLU(inplace=True)): with the tuned
// kernels every FLOP of its convolutions runs on memoplan's kernels. Before the canonical forms
// the convolutions stayed on aten (coverage 0).
TEST(CanonicalForms, ATracedConvolutionNetGetsTheTunedKernels) {
  torch::manual_seed(7);
  torch::jit::Module m("TracedBlock");
  m.register_parameter("w1", torch::randn({16, 3, 3, 3}) * 0.2, false);
  m.register_parameter("w2", torch::randn({16, 16, 3, 3}) * 0.1, false);
  for (const char* bn : {"bn1", "bn2"}) {
    m.register_parameter(std::string(bn) + "_w", torch::rand({16}) + 0.5, false);
    m.register_parameter(std::string(bn) + "_b", torch::randn({16}) * 0.1, false);
    m.register_buffer(std::string(bn) + "_m", torch::randn({16}) * 0.1);
    m.register_buffer(std::string(bn) + "_v", torch::rand({16}) + 0.5);
  }
  m.define(R"(
    def forward(self, x):
        y = torch._convolution(x, self.w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)
        y = torch.batch_norm(y, self.bn1_w, self.bn1_b, self.bn1_m, self.bn1_v, False, 0.1, 1e-5, True)
        y = torch.relu_(y)
        z = torch._convolution(y, self.w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)
        z = torch.batch_norm(z, self.bn2_w, self.bn2_b, self.bn2_m, self.bn2_v, False, 0.1, 1e-5, True)
        z = torch.add_(z, y)
        return torch.relu_(z)
  )");
  m.eval();
  torch::jit::Module reference = m.clone();
  at::set_num_threads(1);
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({1, 3, 24, 24});
  const at::Tensor expected = reference.forward({x}).toTensor();
  PlanOptions options;
  options.kernels = Kernels::kTuned;
  const PlanSummary summary = plan(m, {x}, options);
  ASSERT_TRUE(summary.coverage.measured);
  EXPECT_GT(summary.coverage.flops, 0);
  const at::Tensor got = m.forward({x}).toTensor();
  EXPECT_LT(((got - expected).abs().max() / expected.abs().max()).item<double>(), 1e-5);
  // Without AVX2 + FMA there is no blocked layout: the NCHW / NHWC plan runs aten's kernels.
  if (!testing::onednn_off_here().empty()) GTEST_SKIP() << testing::onednn_off_here();
  EXPECT_GE(summary.coverage.tuned_flops_fraction(), 0.999)
      << "left on aten: "
      << (summary.coverage.left.empty()
              ? ""
              : summary.coverage.left[0].op + " (" + summary.coverage.left[0].reason + ")");
}

// A scripted block whose settings are attributes (as torchvision's InvertedResidual and ReLU6):
// an `if` on a bool that picks the in-place op, one on another that adds the residual.
torch::jit::Module settings_module(bool inplace, bool residual) {
  torch::manual_seed(9);
  torch::jit::Module m("Settings");
  m.register_parameter("w", torch::randn({8, 8, 3, 3}) * 0.1, false);
  m.register_attribute("inplace", c10::BoolType::get(), inplace);
  m.register_attribute("residual", c10::BoolType::get(), residual);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.define(R"(
    def forward(self, x):
        y = torch.conv2d(x, self.w, None, [1, 1], [1, 1])
        if self.inplace:
            y = torch.hardtanh_(y, 0.0, 6.0)
        else:
            y = torch.hardtanh(y, 0.0, 6.0)
        if self.training:
            y = y * 2.0
        if self.residual:
            return x + y
        return y
  )");
  m.eval();
  return m;
}

int count_all(torch::jit::Block* block, c10::Symbol kind) {
  int n = 0;
  for (torch::jit::Node* node : block->nodes()) {
    n += node->kind() == kind;
    for (torch::jit::Block* inner : node->blocks()) n += count_all(inner, kind);
  }
  return n;
}

TEST(AttributeConstants, SettingsAndTrainingFoldAwayTrainingGuarded) {
  torch::jit::Module m = settings_module(true, true);
  auto graph = forward_graph(m);
  const std::vector<FoldedAttribute> folded = fold_attributes(m, *graph);
  ASSERT_EQ(folded.size(), 3u);                                 // inplace, training and residual
  EXPECT_EQ(count_all(graph->block(), c10::prim::GetAttr), 1);  // self.w
  int guarded = 0;
  for (const FoldedAttribute& f : folded) guarded += f.guarded;
  EXPECT_EQ(guarded, 1);
  EXPECT_EQ(first_difference(m, folded), "");
  EXPECT_EQ(first_difference(settings_module(true, false), folded), "residual");
  torch::jit::Module training = settings_module(true, true);
  training.train();
  EXPECT_EQ(first_difference(training, folded), "");  // checked at each call, not at plan()
}

// A scripted net whose blocks read `self.training` (as nn.BatchNorm2d and nn.Dropout do): planned
// in eval mode, the flags are constants and no training branch is left in the planned graph; a
// call with any module's flag switched (train() on one block) runs the unplanned forward and
// gives the training result, and back in eval mode the plan replays.
torch::jit::Module training_net() {
  torch::manual_seed(3);
  auto block = [](const char* name) {
    torch::jit::Module b(name);
    b.register_parameter("w", torch::randn({8, 8, 3, 3}) * 0.1, false);
    b.register_buffer("count", torch::zeros({}, torch::kLong));
    b.register_attribute("training", c10::BoolType::get(), false);
    b.define(R"(
      def forward(self, x):
          y = torch.conv2d(x, self.w, None, [1, 1], [1, 1])
          if self.training:
              self.count.add_(1)
              y = y * 2.0
          if self.training:  # a second read of the same flag (nn.BatchNorm2d reads it 4 times)
              y = y + 1.0
          return torch.relu(y)
    )");
    return b;
  };
  torch::jit::Module m("TrainingNet");
  m.register_module("first", block("Block1"));
  m.register_module("second", block("Block2"));
  m.register_attribute("training", c10::BoolType::get(), false);
  m.define(R"(
    def forward(self, x):
        return self.second.forward(self.first.forward(x))
  )");
  m.eval();
  return m;
}

int count_training_reads(const torch::jit::Block* block) {
  int n = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    n += node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == "training";
    for (const torch::jit::Block* inner : node->blocks()) n += count_training_reads(inner);
  }
  return n;
}

// training_net planned in eval mode, beside an unplanned copy, gradients off.
class TrainingGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    plan(planned, {x});
  }
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({1, 8, 10, 10});
  torch::jit::Module planned = training_net(), reference = training_net();
};

TEST_F(TrainingGuard, TrainingFlagsFoldBehindAGuard) {
  const auto graph = torch::jit::toGraphFunction(planned.get_method("forward").function()).graph();
  EXPECT_EQ(count_training_reads(graph->block()), 0) << *graph;
  EXPECT_EQ(count(*graph, "memoplan::SettingsHold"), 1);

  const at::Tensor eval_out = reference.forward({x}).toTensor();
  PlanStats before = plan_stats();
  EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), eval_out));
  EXPECT_EQ((plan_stats() - before).planned_passes, 1u);

  // One block in training mode: its branch runs (the doubled output, the count), unplanned.
  for (torch::jit::Module* m : {&reference, &planned}) m->attr("second").toModule().train();
  const at::Tensor train_out = reference.forward({x}).toTensor();
  ASSERT_FALSE(torch::equal(train_out, eval_out));
  before = plan_stats();
  EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), train_out));
  EXPECT_EQ((plan_stats() - before).passes, 0u);
  EXPECT_EQ(planned.attr("second").toModule().attr("count").toTensor().item<int64_t>(), 1);
  EXPECT_EQ(planned.attr("first").toModule().attr("count").toTensor().item<int64_t>(), 0);

  // The whole net in training mode, then back in eval: the plan replays.
  reference.train();
  planned.train();
  EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()));
  planned.eval();
  before = plan_stats();
  EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), eval_out));
  EXPECT_EQ((plan_stats() - before).planned_passes, 1u);
}

// A module forgotten (forget_module()) and run again in training mode still takes the unfolded
// forward: the guard outlives the module's other state.
TEST_F(TrainingGuard, AForgottenModuleStillTakesTheUnfoldedForward) {
  forget_module(planned);
  planned.attr("first").toModule().train();
  reference.attr("first").toModule().train();
  EXPECT_EQ(differing_flag(module_id(planned), planned), "first.training");
  for (const int64_t size : {10, 6}) {  // a new shape: the executor makes its code again
    const at::Tensor in = torch::randn({1, 8, size, size});
    EXPECT_TRUE(torch::equal(planned.forward({in}).toTensor(), reference.forward({in}).toTensor()));
  }
}

// plan() on a module whose flag differs from the folded one (its passes would run unplanned) is
// refused with the flag's name; the module still runs, on the unplanned forward.
TEST_F(TrainingGuard, PlanningInAnotherModeNamesTheFlag) {
  planned.attr("first").toModule().train();
  reference.attr("first").toModule().train();
  try {
    plan(planned, {torch::randn({1, 8, 6, 6})});
    ADD_FAILURE() << "planned in another mode";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'first.training'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), reference.forward({x}).toTensor()));
}

// Planned, the settings are constants: the same bits as unplanned, the in-place branch's slab, and
// a second module of the same type with other settings is refused rather than run on the first's.
TEST(AttributeConstants, PlannedSettingsGiveTheSameBitsAndGuardTheType) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  const at::Tensor x = torch::randn({1, 8, 12, 12});
  for (const bool inplace : {true, false}) {
    for (const bool residual : {true, false}) {
      torch::jit::Module planned = settings_module(inplace, residual);
      torch::jit::Module reference = settings_module(inplace, residual);
      const at::Tensor expected = reference.forward({x}).toTensor();
      plan(planned, {x});
      for (int pass = 0; pass < 2; ++pass) {
        EXPECT_TRUE(torch::equal(planned.forward({x}).toTensor(), expected));
      }
    }
  }
  torch::jit::Module first = settings_module(true, true);
  plan(first, {x});
  torch::jit::Module same_type = first.clone();
  same_type.setattr("residual", false);
  EXPECT_THROW(plan(same_type, {x}), std::runtime_error);
}

}  // namespace
}  // namespace memoplan::torch_ext

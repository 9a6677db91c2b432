// The flat executor (flat_executor.h): a planned forward runs as its program, with the outputs of
// the interpreter running the same planned graph; a body it cannot take keeps the interpreter and
// says why; a list an op writes is made anew each call; a vararg operator gets its count of
// inputs; calls on several threads at once; after forget_module the interpreter again.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {
namespace {

// Shape checks in Ifs (as a scripted module's), a list of constants, a branch that yields a value,
// a residual read after its producer's last use elsewhere, a module attribute.
torch::jit::Module branchy() {
  torch::manual_seed(3);
  torch::jit::Module m("Branchy");
  m.register_parameter("w", torch::randn({8, 4, 3, 3}), false);
  m.register_parameter("b", torch::randn({8}), false);
  m.define(R"(
    def forward(self, x):
        assert x.dim() == 4, "expected a 4-d input"
        y = torch.conv2d(x, self.w, self.b, [1, 1], [1, 1])
        if y.size(1) > 4:
            z = torch.relu(y) + y
        else:
            z = y * 2.0
        s = z.sum([2, 3], keepdim=True)
        return (z * s + 1.0).flatten(1)
  )");
  m.eval();
  return m;
}

// The flat executor is opt-in: MEMOPLAN_EXECUTOR=flat while plan() rewrites a module.
class FlatExecutor : public ::testing::Test {
 protected:
  void SetUp() override { setenv("MEMOPLAN_EXECUTOR", "flat", 1); }
  void TearDown() override { unsetenv("MEMOPLAN_EXECUTOR"); }
};

PlanSummary plan_without_flat(torch::jit::Module& m, const at::Tensor& x) {
  unsetenv("MEMOPLAN_EXECUTOR");
  PlanSummary s = plan(m, {x});
  setenv("MEMOPLAN_EXECUTOR", "flat", 1);
  return s;
}

TEST_F(FlatExecutor, APlannedForwardRunsItsProgramWithTheInterpretersOutputs) {
  const at::Tensor x = torch::randn({2, 4, 10, 10});
  torch::jit::Module flat = branchy(), interpreted = branchy();
  EXPECT_EQ(plan(flat, {x}).executor, "flat");
  EXPECT_EQ(plan_without_flat(interpreted, x).executor.rfind("interpreter: the default", 0), 0u);
  for (int i = 0; i < 5; ++i) {
    const at::Tensor input = torch::randn({2, 4, 10, 10});
    const at::Tensor a = flat.forward({input}).toTensor();
    EXPECT_TRUE(at::equal(a, interpreted.forward({input}).toTensor())) << "pass " << i;
    EXPECT_TRUE(at::allclose(a, branchy().forward({input}).toTensor()));
  }
  // The body's checks still raise where the input is wrong.
  EXPECT_THROW(flat.forward({torch::randn({4, 10, 10})}), std::exception);
  EXPECT_TRUE(at::equal(flat.forward({x}).toTensor(), interpreted.forward({x}).toTensor()));
}

TEST_F(FlatExecutor, ALoopKeepsTheInterpreterAndSaysWhy) {
  torch::jit::Module m("Looping");
  m.define(R"(
    def forward(self, x):
        for _ in range(int(x.size(0))):
            x = x * 0.5 + 1.0
        return x
  )");
  m.eval();
  const at::Tensor x = torch::ones({3, 4});
  const PlanSummary s = plan(m, {x});
  EXPECT_EQ(s.executor.rfind("interpreter: a loop", 0), 0u) << s.executor;
  EXPECT_TRUE(at::allclose(m.forward({x}).toTensor(), torch::full({3, 4}, 1.875)));
}

// aten::append writes its list: a list made once for every call would grow call after call.
TEST_F(FlatExecutor, AListAnOpWritesIsMadeAnewEachCall) {
  torch::jit::Module m("Appending");
  m.define(R"(
    def forward(self, x):
        sizes = [1, 2]
        sizes.append(3)
        return x * float(len(sizes))
  )");
  m.eval();
  const at::Tensor x = torch::ones({4});
  ASSERT_EQ(plan(m, {x}).executor, "flat");
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::equal(m.forward({x}).toTensor(), torch::full({4}, 3.0))) << "call " << i;
  }
}

// aten::format takes any number of inputs and reads their count off the stack, as the
// interpreter pushes it (the message scripted TransformerEncoder builds in every call).
TEST_F(FlatExecutor, AVarargOperatorGetsItsCountOfInputs) {
  torch::jit::Module m("Formatting");
  m.define(R"(
    def forward(self, x):
        message = "{} rows of {}".format(x.size(0), x.size(1))  # "4 rows of 5"
        return x * float(len(message))
  )");
  m.eval();
  const at::Tensor x = torch::ones({4, 5});
  ASSERT_EQ(plan(m, {x}).executor, "flat");
  EXPECT_TRUE(at::equal(m.forward({x}).toTensor(), torch::full({4, 5}, 11.0)));
}

TEST_F(FlatExecutor, CallsOnSeveralThreadsAtOnce) {
  torch::jit::Module m = branchy();
  const at::Tensor x = torch::randn({2, 4, 10, 10});
  ASSERT_EQ(plan(m, {x}).executor, "flat");
  const at::Tensor expected = branchy().forward({x}).toTensor();
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) wrong[t] += !at::allclose(m.forward({x}).toTensor(), expected);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

TEST_F(FlatExecutor, AForgottenModuleRunsOnTheInterpreter) {
  torch::jit::Module m = branchy();
  const at::Tensor x = torch::randn({2, 4, 10, 10});
  ASSERT_EQ(plan(m, {x}).executor, "flat");
  const at::Tensor before = m.forward({x}).toTensor();
  forget_module(m);
  EXPECT_TRUE(at::equal(m.forward({x}).toTensor(), before));
}

}  // namespace
}  // namespace memoplan::torch_ext

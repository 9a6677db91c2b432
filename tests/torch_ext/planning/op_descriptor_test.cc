// op_descriptor.h: op::Ints and op::Floats appear in the schema as int[] and float[] and read the
// interpreter's lists whole, inline or (past four elements) on the heap; a call through a
// registered operator's graph node reads them the same way.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/jit.h>

#include <string>
#include <vector>

#include "planning/op_descriptor.h"

namespace memoplan::torch_ext {
namespace {

struct ListsOp {
  static constexpr const char* kName = "memoplan_test::lists";
  static constexpr const char* kReturns = "float";
  op::Ints ints;
  op::Floats floats;
  std::vector<int64_t> vector;
  static constexpr auto fields() {
    return std::make_tuple(op::field("ints", &ListsOp::ints), op::field("floats", &ListsOp::floats),
                           op::field("vector", &ListsOp::vector));
  }
};

// Every element, weighted by its position, so that order and length both count.
double weigh(ListsOp op) {
  double sum = 0;
  for (size_t i = 0; i < op.ints.size(); ++i) sum += static_cast<double>(op.ints[i]) * (i + 1);
  for (size_t i = 0; i < op.floats.size(); ++i) sum += op.floats[i] * 100 * (i + 1);
  for (size_t i = 0; i < op.vector.size(); ++i) sum += static_cast<double>(op.vector[i]) * 1e4;
  return sum;
}

torch::jit::RegisterOperators lists_operator({op::make_api_operator<ListsOp, &weigh>()});

TEST(OpDescriptor, InlineListsHaveTheListTypes) {
  EXPECT_EQ(op::schema<ListsOp>(),
            "memoplan_test::lists(int[] ints, float[] floats, int[] vector) -> float");
}

TEST(OpDescriptor, InlineListsReadEveryElementInOrder) {
  for (const size_t n : {size_t{0}, size_t{2}, size_t{4}, size_t{9}}) {  // 9: past the inline four
    std::vector<int64_t> ints;
    std::vector<double> floats;
    for (size_t i = 0; i < n; ++i) {
      ints.push_back(static_cast<int64_t>(i) * 3 - 4);
      floats.push_back(0.25 * static_cast<double>(i) - 1.0);
    }
    std::vector<c10::IValue> args = {c10::IValue(ints), c10::IValue(floats),
                                     c10::IValue(std::vector<int64_t>{7, 8})};
    const ListsOp op = op::read<ListsOp>(args.data());
    EXPECT_EQ(std::vector<int64_t>(op.ints.begin(), op.ints.end()), ints) << n;
    EXPECT_EQ(std::vector<double>(op.floats.begin(), op.floats.end()), floats) << n;
    EXPECT_EQ(op.vector, (std::vector<int64_t>{7, 8}));
  }
}

TEST(OpDescriptor, GraphCallsPassTheirConstantListsWhole) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : float):
  %ints : int[] = prim::Constant[value=[1, 2, 3, 4, 5]]()
  %floats : float[] = prim::Constant[value=[0.5, 1.5]]()
  %vector : int[] = prim::Constant[value=[2]]()
  %y : float = memoplan_test::lists(%ints, %floats, %vector)
  %z : float = aten::add(%y, %x)
  return (%z)
)IR",
                      graph.get());
  torch::jit::GraphExecutor executor(graph, "");
  for (int call = 0; call < 3; ++call) {  // the interpreter's constants, read again each call
    torch::jit::Stack stack = {c10::IValue(1.0)};
    executor.run(stack);
    const double ints = 1 * 1 + 2 * 2 + 3 * 3 + 4 * 4 + 5 * 5;
    const double floats = 0.5 * 100 + 1.5 * 200;
    EXPECT_DOUBLE_EQ(stack.at(0).toDouble(), ints + floats + 2e4 + 1.0);
  }
}

}  // namespace
}  // namespace memoplan::torch_ext

// recorded_operator (op_record.h).
#include "op_record.h"

#include <ATen/record_function.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

namespace memoplan::torch_ext {

torch::jit::Operator recorded_operator(const std::string& schema, void (*op)(torch::jit::Stack&),
                                       c10::AliasAnalysisKind alias) {
  const c10::FunctionSchema parsed = torch::jit::parseSchema(schema);
  const size_t n = parsed.arguments().size();
  return torch::jit::Operator(
      schema,
      [name = parsed.name(), n, op](torch::jit::Stack& stack) {
        RECORD_USER_SCOPE_WITH_INPUTS(
            name.c_str(), c10::ArrayRef<const c10::IValue>(&stack[stack.size() - n], n));
        op(stack);
      },
      alias);
}

}  // namespace memoplan::torch_ext

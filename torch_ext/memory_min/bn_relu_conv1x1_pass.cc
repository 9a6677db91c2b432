// The graph rewrite of memory min's dense-layer bottleneck (bn_relu_conv1x1.h): which chains become
// memoplan::bn_relu_conv1x1 / memoplan::cat_bn_relu_conv1x1 (the ops: bn_relu_conv1x1.cc), and
// memoplan::cat_sizes for a fused concatenation's size checks.
#include "bn_relu_conv1x1.h"
#include "bn_relu_conv1x1_operators.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <vector>

namespace memoplan::torch_ext {
namespace {

// The sizes aten::cat's output would have, without making it.
struct CatSizesOp {
  static constexpr const char* kName = "memoplan::cat_sizes";
  static constexpr const char* kReturns = "int[]";
  c10::List<at::Tensor> tensors;
  int64_t dim = 0;
  static constexpr auto fields() {
    return std::make_tuple(op::field("tensors", &CatSizesOp::tensors),
                           op::field("dim", &CatSizesOp::dim));
  }
};

std::vector<int64_t> cat_sizes(CatSizesOp op) {
  TORCH_CHECK(!op.tensors.empty(), "memoplan::cat_sizes: no tensors");
  std::vector<int64_t> sizes = op.tensors.get(0).sizes().vec();
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t d = op.dim < 0 ? op.dim + rank : op.dim;
  TORCH_CHECK(d >= 0 && d < rank, "memoplan::cat_sizes: dimension out of range");
  int64_t total = 0;
  for (size_t i = 0; i < op.tensors.size(); ++i) total += op.tensors.get(i).size(d);
  sizes[static_cast<size_t>(d)] = total;
  return sizes;
}

torch::jit::RegisterOperators cat_sizes_operator({op::make_operator<CatSizesOp, &cat_sizes>()});

// Whether `value` is read after `node`: a later use, or a concatenation of a list read later
// (scripted DenseNet appends to one list), or of tensors read later (traced DenseNet builds a new
// list of every earlier layer's features for each layer: the list dies, its tensors live on).
bool read_after(const torch::jit::Value* value, const torch::jit::Node* node) {
  for (const torch::jit::Use& use : value->uses()) {
    if (use.user != node && use.user->isAfter(node)) return true;
  }
  const torch::jit::Node* producer = value->node();
  if (producer->kind() == c10::aten::cat && producer->inputs().size() >= 1) {
    const torch::jit::Value* list = producer->input(0);
    for (const torch::jit::Use& use : list->uses()) {
      if (use.user != producer && use.user->isAfter(producer)) return true;
    }
    const torch::jit::Node* made = list->node();
    if (made->kind() == c10::prim::ListConstruct) {
      for (const torch::jit::Value* element : made->inputs()) {
        for (const torch::jit::Use& use : element->uses()) {
          if (use.user != made && use.user->isAfter(producer)) return true;
        }
      }
    }
  }
  return false;
}

bool single_use_by(const torch::jit::Value* value, const torch::jit::Node* user) {
  return value->uses().size() == 1 && value->uses()[0].user == user && value->uses()[0].offset == 0;
}

void collect_fusable(torch::jit::Block* block, std::vector<torch::jit::Node*>& out) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) collect_fusable(inner, out);
    if (node->kind() != c10::aten::conv2d ||
        !node->matches("aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, "
                       "int[2] stride=1, int[2] padding=0, int[2] dilation=1, int groups=1) -> "
                       "Tensor")) {
      continue;
    }
    torch::jit::Node* relu = node->input(0)->node();
    if ((relu->kind() != c10::aten::relu && relu->kind() != c10::aten::relu_) ||
        relu->owningBlock() != block || !single_use_by(relu->output(), node)) {
      continue;
    }
    torch::jit::Node* bn = relu->input(0)->node();
    if (bn->kind() != c10::aten::batch_norm || bn->owningBlock() != block ||
        !bn->matches("aten::batch_norm(Tensor input, Tensor? weight, Tensor? bias, "
                     "Tensor? running_mean, Tensor? running_var, bool training, float momentum, "
                     "float eps, bool cudnn_enabled) -> Tensor") ||
        !single_use_by(bn->output(), relu) || !read_after(bn->input(0), bn)) {
      continue;
    }
    out.push_back(node);
  }
}

// `node`, or the node of `block` that holds it in one of its blocks; nullptr if none does.
const torch::jit::Node* in_block(const torch::jit::Node* node, const torch::jit::Block* block) {
  while (node && node->owningBlock() != block) {
    node = node->owningBlock()->owningNode();
  }
  return node;
}

// The batch norm's input's concatenation, when the batch norm is all that reads its bytes
// (aten::dim and aten::size aside: batch norm's own checks) and nothing uses the concatenated list
// between the concatenation and the convolution (the fused op reads the list there).
torch::jit::Node* own_concat(torch::jit::Node* bn, const torch::jit::Node* conv) {
  torch::jit::Node* cat = bn->input(0)->node();
  if (cat->kind() != c10::aten::cat || cat->inputs().size() != 2 ||
      cat->owningBlock() != bn->owningBlock() ||
      !cat->matches("aten::cat(Tensor[] tensors, int dim=0) -> Tensor")) {
    return nullptr;
  }
  for (const torch::jit::Use& use : cat->output()->uses()) {
    const torch::jit::Node* user = use.user;
    const bool shape = user->kind() == c10::aten::dim ||
                       (user->kind() == c10::aten::size && user->inputs().size() == 1);
    if (user != bn && !shape) return nullptr;
  }
  for (const torch::jit::Use& use : cat->input(0)->uses()) {
    const torch::jit::Node* user = in_block(use.user, cat->owningBlock());
    if (user && user != cat && user->isAfter(cat) && user->isBefore(conv)) return nullptr;
  }
  return cat;
}

// The concatenation's shape checks read its inputs' instead: its rank is its first input's, its
// sizes memoplan::cat_sizes's.
void shape_from_inputs(torch::jit::Graph& graph, torch::jit::Node* cat) {
  std::vector<torch::jit::Node*> users;
  for (const torch::jit::Use& use : cat->output()->uses()) {
    if (use.user->kind() == c10::aten::dim || use.user->kind() == c10::aten::size) {
      users.push_back(use.user);
    }
  }
  for (torch::jit::Node* user : users) {
    torch::jit::WithInsertPoint point(user);
    if (user->kind() == c10::aten::dim) {
      torch::jit::Value* zero = graph.insertConstant(int64_t{0});
      torch::jit::Node* first = graph.create(c10::aten::__getitem__, {cat->input(0), zero}, 1);
      first->output()->setType(c10::TensorType::get());
      graph.insertNode(first);
      user->replaceInput(0, first->output());
    } else {
      op::Builder<CatSizesOp> b(graph);
      b.set(&CatSizesOp::tensors, cat->input(0)).set(&CatSizesOp::dim, cat->input(1));
      torch::jit::Node* sizes = b.create();
      sizes->output()->setType(user->output()->type());
      graph.insertNode(sizes);
      user->output()->replaceAllUsesWith(sizes->output());
      user->destroy();
    }
  }
}

}  // namespace

int fuse_bn_relu_conv1x1(torch::jit::Graph& graph) {
  std::vector<torch::jit::Node*> convs;
  collect_fusable(graph.block(), convs);
  for (torch::jit::Node* conv : convs) {
    torch::jit::Node* relu = conv->input(0)->node();
    torch::jit::Node* bn = relu->input(0)->node();
    torch::jit::Node* cat = own_concat(bn, conv);
    if (cat) shape_from_inputs(graph, cat);
    torch::jit::Node* fused = nullptr;
    if (cat) {
      op::Builder<CatBnReluConv1x1Op> b(graph);
      b.set(&CatBnReluConv1x1Op::tensors, cat->input(0));
      b.set(&CatBnReluConv1x1Op::dim, cat->input(1));
      set_bn_conv(b, bn, conv);
      fused = b.create();
    } else {
      op::Builder<BnReluConv1x1Op> b(graph);
      b.set(&BnReluConv1x1Op::input, bn->input(0));
      set_bn_conv(b, bn, conv);
      fused = b.create();
    }
    fused->output()->setType(conv->output()->type());
    fused->setSourceRange(conv->sourceRange());
    fused->insertBefore(conv);
    conv->output()->replaceAllUsesWith(fused->output());
    conv->destroy();
    relu->destroy();
    bn->destroy();
    if (cat) cat->destroy();
  }
  return static_cast<int>(convs.size());
}

}  // namespace memoplan::torch_ext

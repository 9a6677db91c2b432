#include "shadow_stack.h"

#include <ATen/record_function.h>

#include <atomic>
#include <vector>

#include "memoplan/torch/graph_node.h"

namespace memoplan::torch_ext {
namespace {

constexpr uint64_t kFnvBasis = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a of `name` continuing from `hash`, then a separator so that ("ab","c") != ("a","bc").
uint64_t extend_hash(uint64_t hash, const char* name) {
  for (const char* c = name; *c; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * kFnvPrime;
  return (hash ^ 0xff) * kFnvPrime;
}

struct Frame {
  const void* key;  // the RecordFunction: identifies the scope at its end
  const char* name;
  uint64_t path_hash;
};

// Bumped whenever the callback is (re)registered. A scope whose start ran under an earlier
// registration may never see its end, so a stack from an earlier epoch is stale and starts over.
std::atomic<uint64_t> g_epoch{0};
int g_users = 0;
at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;

struct ThreadStack {
  uint64_t epoch = 0;
  std::vector<Frame> frames;

  std::vector<Frame>& fresh() {
    const uint64_t now = g_epoch.load(std::memory_order_acquire);
    if (epoch != now) {
      frames.clear();
      epoch = now;
    }
    return frames;
  }
};

thread_local ThreadStack t_stack;
thread_local int64_t t_node = kUnknownNode;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  std::vector<Frame>& frames = t_stack.fresh();
  const char* name = fn.name();
  const uint64_t parent = frames.empty() ? kFnvBasis : frames.back().path_hash;
  frames.push_back(Frame{&fn, name, extend_hash(parent, name)});
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  std::vector<Frame>& frames = t_stack.fresh();
  // Pops fn's frame and any above it whose end never came here (an async op may end on another
  // thread; there fn is not found and nothing is popped).
  for (size_t i = frames.size(); i-- > 0;) {
    if (frames[i].key == &fn) {
      frames.resize(i);
      return;
    }
  }
}

}  // namespace

void set_current_node(int64_t node) { t_node = node; }
int64_t current_node() { return t_node; }

namespace shadow_stack {

void enable() {
  if (g_users++ > 0) return;
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                       .needsInputs(false)
                                       .needsOutputs(false)
                                       .scopes({at::RecordScope::FUNCTION}));
}

void disable() {
  if (g_users == 0 || --g_users > 0) return;
  at::removeCallback(g_handle);
  g_handle = at::INVALID_CALLBACK_HANDLE;
}

OpContext current() {
  OpContext context;
  context.node = t_node;
  const std::vector<Frame>& frames = t_stack.fresh();
  if (!frames.empty()) {
    context.inner = frames.back().name;
    context.outer = frames.front().name;
    context.path_hash = frames.back().path_hash;
  }
  return context;
}

size_t depth() { return t_stack.fresh().size(); }

}  // namespace shadow_stack
}  // namespace memoplan::torch_ext

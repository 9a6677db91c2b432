// The convolution calls a thread resolved (resolved_calls.h).
#include "resolved_calls.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace memoplan::torch_ext::blocked {

struct Resolved {
  onednn::ConvSpec spec;
  int threads = 0;
  tuned::Sources sources;
  struct Variant {  // [whether the residual may be written over]
    std::weak_ptr<const onednn::Conv> primitive;
    std::weak_ptr<const void> weights_owner, bias_owner;  // what keeps the two below
    const void* weights = nullptr;
    const float* bias = nullptr;
    bool in_place = false;
    bool set = false;
  } variants[2];
};

struct ResolvedTable {
  // Per site, the calls of its last few input shapes (a server's thread alternates requests of
  // several; one entry per site resolved none of them again), the most recent last.
  static constexpr size_t kShapesPerSite = 4;
  uint64_t generation = 0, forgotten = 0;
  std::unordered_map<int64_t, std::vector<Resolved>> by_site;
};

namespace {

bool same_post(c10::ArrayRef<onednn::PostOp> x, c10::ArrayRef<onednn::PostOp> y) {
  auto same_op = [](const onednn::PostOp& p, const onednn::PostOp& q) {
    return p.kind == q.kind && p.alpha == q.alpha && p.beta == q.beta;
  };
  return std::equal(x.begin(), x.end(), y.begin(), y.end(), same_op);
}

// Whether the two specs agree but for their post-ops.
bool same_geometry(const onednn::ConvSpec& x, const onednn::ConvSpec& y) {
  return x.n == y.n && x.c == y.c && x.h == y.h && x.w == y.w && x.out_channels == y.out_channels &&
         x.kh == y.kh && x.kw == y.kw && x.groups == y.groups && x.stride[0] == y.stride[0] &&
         x.stride[1] == y.stride[1] && x.padding[0] == y.padding[0] &&
         x.padding[1] == y.padding[1] && x.dilation[0] == y.dilation[0] &&
         x.dilation[1] == y.dilation[1] && x.input == y.input && x.output == y.output &&
         x.winograd == y.winograd;
}

// Whether `entry` was resolved for a call like this one, at `threads` intra-op threads.
bool matches(const Resolved& entry, const onednn::ConvSpec& spec,
             c10::ArrayRef<onednn::PostOp> post, const tuned::Sources& sources, int threads) {
  return entry.threads == threads && entry.sources == sources && same_geometry(entry.spec, spec) &&
         same_post(entry.spec.post, post);
}

}  // namespace

ResolvedTable* resolved_calls() {
  thread_local ResolvedTable table;
  if (tuned::census_under_way()) return nullptr;
  const uint64_t generation = tuned::resolution_generation();
  const uint64_t forgotten = onednn::primitives_forgotten();
  if (table.generation != generation || table.forgotten != forgotten) {
    table.by_site.clear();
    table.generation = generation;
    table.forgotten = forgotten;
  }
  return &table;
}

const Resolved* resolved_for(ResolvedTable* table, int64_t site, const onednn::ConvSpec& spec,
                             c10::ArrayRef<onednn::PostOp> post, const tuned::Sources& sources) {
  if (!table) return nullptr;
  const auto it = table->by_site.find(site);
  if (it == table->by_site.end()) return nullptr;
  const int threads = at::get_num_threads();
  for (const Resolved& entry : it->second) {
    if (matches(entry, spec, post, sources, threads)) return &entry;
  }
  return nullptr;
}

bool take(const Resolved& entry, bool sole, Resolution& out) {
  const Resolved::Variant& v = entry.variants[sole ? 1 : 0];
  if (!v.set) return false;
  out.primitive = v.primitive.lock();
  out.weights_owner = v.weights_owner.lock();
  out.bias_owner = v.bias_owner.lock();
  if (!out.primitive || !out.weights_owner || !out.bias_owner) return false;
  out.weights = v.weights;
  out.bias = v.bias;
  out.in_place = v.in_place;
  return true;
}

void keep(ResolvedTable* table, int64_t site, const onednn::ConvSpec& spec,
          const tuned::Sources& sources, bool sole, const Resolution& r) {
  if (!table || !r.weights_owner || !r.bias_owner ||
      tuned::resolution_generation() != table->generation ||
      onednn::primitives_forgotten() != table->forgotten) {
    return;
  }
  const int threads = at::get_num_threads();
  std::vector<Resolved>& entries = table->by_site[site];
  auto it = std::find_if(entries.begin(), entries.end(), [&](const Resolved& e) {
    return matches(e, spec, spec.post, sources, threads);
  });
  if (it == entries.end()) {
    if (entries.size() == ResolvedTable::kShapesPerSite) entries.erase(entries.begin());
    Resolved fresh;
    fresh.spec = spec;
    fresh.threads = threads;
    fresh.sources = sources;
    entries.push_back(std::move(fresh));
    it = entries.end() - 1;
  }
  Resolved::Variant& v = it->variants[sole ? 1 : 0];
  v = {r.primitive, r.weights_owner, r.bias_owner, r.weights, r.bias, r.in_place, true};
}

}  // namespace memoplan::torch_ext::blocked

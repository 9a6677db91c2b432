// The prepared forms of the weights the tuned ops compute with (GEMM panels, oneDNN packings, a
// batch norm folded into its convolution), one cache per kind, kept per site (the weight of one
// replaced op: tuned::new_site()). One repack rule for every kind: a site's forms are made from its
// sources' values, known by (storage, version counter): an in-place change bumps the counter, a
// new tensor changes the storage, and memoplan's own immutable weights (a folded convolution's)
// carry a generation number instead. When any source differs from what the site's forms were made
// from, all of them are dropped and made again on use. A census (plan()'s last pass) keeps only the
// forms that pass used: the candidates a measurement packed and the forms of layouts given up go.
// Each site belongs to the module whose graph was being rewritten when it was made (RewriteOwner):
// a census, a byte count and forget_module act on one module's sites, never another's.
// ATen types; for tuned/.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "budget/released_weights.h"
#include "planning/planning.h"  // runtime_pass::OffPlan

namespace memoplan::torch_ext::tuned {

// What a site's forms were made from: up to kMaxSources (storage, version) pairs (a convolution's
// weight and bias and its batch norm's four tensors at most). Compared on every call: no heap.
class Sources {
 public:
  static constexpr size_t kMaxSources = 6;
  // `t`'s identity; an undefined tensor is one too (no storage). `version` >= 0 stands for the
  // version counter (a generation number); an inference tensor, which has none, counts as -1.
  Sources& add(const at::Tensor& t, int64_t version = -1) {
    Source& s = items_.at(count_++);
    s.data = t.defined() ? t.data_ptr() : nullptr;
    s.version = version >= 0 ? version : (!t.defined() || t.is_inference() ? -1 : t._version());
    return *this;
  }
  bool operator==(const Sources& o) const {
    if (count_ != o.count_) return false;
    for (size_t i = 0; i < count_; ++i) {
      if (items_[i].data != o.items_[i].data || items_[i].version != o.items_[i].version) {
        return false;
      }
    }
    return true;
  }
  bool operator!=(const Sources& o) const { return !(*this == o); }

 private:
  struct Source {
    const void* data = nullptr;
    int64_t version = -1;
  };
  std::array<Source, kMaxSources> items_{};
  size_t count_ = 0;
};

// While one is alive, what the calling thread's rewrite makes (sites, layout graphs, report lines)
// belongs to `module` (the id plan() registered it under); outside one, to no module (-1).
class RewriteOwner {
 public:
  explicit RewriteOwner(int64_t module);
  ~RewriteOwner();
  RewriteOwner(const RewriteOwner&) = delete;
  RewriteOwner& operator=(const RewriteOwner&) = delete;

 private:
  int64_t saved_;
};
int64_t rewrite_owner();
// A new place that packs weights (one per weight of a replaced op), owned by rewrite_owner(); with
// count > 1 the first of `count` consecutive ones (an encoder layer's four weights).
int64_t new_site(int count = 1);
// The module `site` belongs to; -1 for one made outside a rewrite.
int64_t site_module(int64_t site);

// What a call resolved once (blocked/resolved_calls.h: a convolution's primitive, packing and bias,
// kept weakly: a form a cache drops is gone from it too) holds while this has not moved: it moves
// when a census begins or ends (a plan's choices may change), a module's sites are forgotten or
// the kernel options change.
uint64_t resolution_generation();
void resolutions_changed();
// Whether some module's census is under way: calls then resolve through the caches, which mark
// what the pass uses.
bool census_under_way();

// Every WeightCache, for the census and the byte counts (weight_cache.cc).
class WeightCacheBase {
 public:
  WeightCacheBase();  // registers: caches are made with new and never destroyed
  // Drops the forms of `module`'s sites (every site's for -1) not used since `epoch`.
  virtual void drop_unused_since(uint64_t epoch, int64_t module) = 0;
  // The bytes of the forms kept for `module`'s sites (every site's for -1).
  virtual uint64_t bytes(int64_t module) = 0;

 protected:
  ~WeightCacheBase() = default;
};
// The census of one module: its sites' forms used from now on are marked; end_census() drops every
// form of its sites not used since the matching begin_census() (made again on use) and returns the
// bytes its sites keep. While one runs, a site of the module that makes a new form drops its forms
// not used since it began. plan() begins one with each of its passes and ends it after the last.
void begin_census(int64_t module);
uint64_t end_census(int64_t module);
// The epoch `module`'s census began in; 0 while it has none.
uint64_t census_start(int64_t module);
// The epoch a form used now is marked with.
uint64_t census_epoch();
// The bytes of the forms kept now for `module`'s sites (every site's for -1).
uint64_t packed_bytes(int64_t module);
// The module will not run again: its sites' forms go (forms are made again if it does).
void forget_sites(int64_t module);

// Made with new, never destroyed (reports and late passes may read it at exit).
template <typename Form>
class WeightCache final : public WeightCacheBase {
 public:
  // `bytes_of` counts a form's own bytes (not its sources').
  explicit WeightCache(uint64_t (*bytes_of)(const Form&)) : bytes_of_(bytes_of) {}

  // The form of `site` for which matches(form) holds, made from `sources`. Where there is none, or
  // the sources changed since the site's forms were made, make() makes it (outside the lock, so
  // other sites go on; beside the plan: it outlives the pass) and it is kept; two threads that
  // make one at once keep the first. Released plain weights go back once it is made
  // (released_weights.h).
  template <typename Matches, typename Make>
  std::shared_ptr<const Form> get(int64_t site, const Sources& sources, const Matches& matches,
                                  const Make& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto found = find(site, sources, matches)) return found;
    }
    std::shared_ptr<const Form> made;
    {
      runtime_pass::OffPlan off_plan;
      made = make();
    }
    budget::give_back_plain_weights();
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = find(site, sources, matches)) return found;
    // The site's forms not used since the census began belong to a graph the passes left (the
    // profiling executor's first graph, a layout given up): they go now, not at the census' end.
    // Outside its module's census (serving) no form is dropped: another shape's is not stale.
    std::vector<Kept>& forms = sites_[site].forms;
    const uint64_t since = census_start(site_module(site));
    forms.erase(
        std::remove_if(forms.begin(), forms.end(), [&](const Kept& k) { return k.used < since; }),
        forms.end());
    forms.push_back({made, bytes_of_(*made), census_epoch()});
    return made;
  }

  // Calls f(form) for each form kept for `site` (under the lock: f must not use this cache).
  template <typename F>
  void for_each(int64_t site, const F& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = sites_.find(site);
    if (it == sites_.end()) return;
    for (const Kept& k : it->second.forms) f(*k.form);
  }

  // Drops every form kept for `site` (an op that measured aten's faster keeps none).
  void forget(int64_t site) {
    std::lock_guard<std::mutex> lock(mutex_);
    sites_.erase(site);
  }

  void drop_unused_since(uint64_t epoch, int64_t module) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = sites_.begin(); it != sites_.end();) {
      if (module >= 0 && site_module(it->first) != module) {
        ++it;
        continue;
      }
      auto& forms = it->second.forms;
      forms.erase(
          std::remove_if(forms.begin(), forms.end(), [&](const Kept& k) { return k.used < epoch; }),
          forms.end());
      it = forms.empty() ? sites_.erase(it) : std::next(it);
    }
  }

  uint64_t bytes(int64_t module) override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t total = 0;
    for (const auto& [site, s] : sites_) {
      if (module >= 0 && site_module(site) != module) continue;
      for (const Kept& k : s.forms) total += k.bytes;
    }
    return total;
  }

 private:
  struct Kept {
    std::shared_ptr<const Form> form;
    uint64_t bytes = 0;
    uint64_t used = 0;  // the census epoch it was last returned in
  };
  struct Site {
    Sources sources;
    std::vector<Kept> forms;
  };

  // Under the lock. A site whose sources changed loses its forms here (the repack rule).
  template <typename Matches>
  std::shared_ptr<const Form> find(int64_t site, const Sources& sources, const Matches& matches) {
    Site& s = sites_[site];
    if (s.sources != sources) {
      s.sources = sources;
      s.forms.clear();
      return nullptr;
    }
    for (Kept& k : s.forms) {
      if (matches(*k.form)) {
        k.used = census_epoch();
        return k.form;
      }
    }
    return nullptr;
  }

  uint64_t (*bytes_of_)(const Form&);
  std::mutex mutex_;
  std::unordered_map<int64_t, Site> sites_;
};

}  // namespace memoplan::torch_ext::tuned

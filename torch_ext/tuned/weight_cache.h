// The prepared forms of the weights the tuned ops compute with (GEMM panels, oneDNN packings, a
// batch norm folded into its convolution), one cache per kind, kept per site (the weight of one
// replaced op: tuned::new_site()). One repack rule for every kind: a site's forms are made from its
// sources' values, known by (storage, version counter): an in-place change bumps the counter, a
// new tensor changes the storage, and memoplan's own immutable weights (a folded convolution's)
// carry a generation number instead. When any source differs from what the site's forms were made
// from, all of them are dropped and made again on use. A census (plan()'s last pass) keeps only the
// forms that pass used: the candidates a measurement packed and the forms of layouts given up go.
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

// Every WeightCache, for the census and the byte count (weight_cache.cc).
class WeightCacheBase {
 public:
  WeightCacheBase();  // registers: caches are made with new and never destroyed
  virtual void drop_unused_since(uint64_t epoch) = 0;
  virtual uint64_t bytes() = 0;

 protected:
  ~WeightCacheBase() = default;
};
// The census: forms used from now on are marked; end_census() drops every form of every cache not
// used since the matching begin_census() (made again on use) and returns the bytes kept. While one
// runs, a site that makes a new form drops its forms not used since it began. plan() begins one
// with each of its passes and ends it after the last.
void begin_census();
uint64_t end_census();
// The bytes of every form kept now.
uint64_t packed_bytes();
uint64_t census_epoch();

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
    std::vector<Kept>& forms = sites_[site].forms;
    const uint64_t epoch = census_epoch();
    forms.erase(std::remove_if(forms.begin(), forms.end(),
                               [&](const Kept& k) { return k.used < epoch; }),
                forms.end());
    forms.push_back({made, bytes_of_(*made), epoch});
    return made;
  }

  // Drops every form kept for `site` (an op that measured aten's faster keeps none).
  void forget(int64_t site) {
    std::lock_guard<std::mutex> lock(mutex_);
    sites_.erase(site);
  }

  void drop_unused_since(uint64_t epoch) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = sites_.begin(); it != sites_.end();) {
      auto& forms = it->second.forms;
      forms.erase(std::remove_if(forms.begin(), forms.end(),
                                 [&](const Kept& k) { return k.used < epoch; }),
                  forms.end());
      it = forms.empty() ? sites_.erase(it) : std::next(it);
    }
  }

  uint64_t bytes() override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t total = 0;
    for (const auto& [site, s] : sites_) {
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

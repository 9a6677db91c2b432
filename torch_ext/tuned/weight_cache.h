// The prepared forms of the weights the tuned ops compute with (GEMM panels, oneDNN packings, a
// batch norm folded into its convolution), one cache per kind, kept per site (the weight of one
// replaced op: tuned::new_site()). One repack rule for every kind: a site's forms are made from its
// sources' values, known by (storage, version counter): an in-place change bumps the counter, a
// new tensor changes the storage, and memoplan's own immutable weights (a folded convolution's)
// carry a generation number instead. When any source differs from what the site's forms were made
// from, all of them are dropped and made again on use. ATen types; for tuned/.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

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

// Made with new, never destroyed (reports and late passes may read it at exit).
template <typename Form>
class WeightCache {
 public:
  // The form of `site` for which matches(form) holds, made from `sources`. Where there is none, or
  // the sources changed since the site's forms were made, make() makes it (outside the lock, so
  // other sites go on; beside the plan: it outlives the pass) and it is kept; two threads that
  // make one at once keep the first.
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
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = find(site, sources, matches)) return found;
    sites_[site].forms.push_back(made);
    return made;
  }

  // Drops every form kept for `site` (an op that measured aten's faster keeps none).
  void forget(int64_t site) {
    std::lock_guard<std::mutex> lock(mutex_);
    sites_.erase(site);
  }

 private:
  struct Site {
    Sources sources;
    std::vector<std::shared_ptr<const Form>> forms;
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
    for (const auto& form : s.forms) {
      if (matches(*form)) return form;
    }
    return nullptr;
  }

  std::mutex mutex_;
  std::unordered_map<int64_t, Site> sites_;
};

}  // namespace memoplan::torch_ext::tuned

// A decision made once per key and process, then only read: which kernel is fastest for a shape
// (the tuned kernels' measurements), whether parts compute aten's bytes (memory min's and the
// budget's checks). One implementation for every such table. No torch headers.
#pragma once

#include <map>
#include <mutex>
#include <utility>

#include "planning.h"  // runtime_pass::Unrecorded

namespace memoplan::torch_ext {

// Keys are ordered (std::map): the reports list them in order. Made with new and never destroyed
// (reports read them at exit, after static destructors may have run).
template <typename Key, typename Choice>
class ChoiceCache {
 public:
  // The choice for `key`, made by `decide()` the first time the key is seen. decide() runs beside
  // the pass (runtime_pass::Unrecorded: what it allocates is neither planned nor recorded, a later
  // pass does not repeat it) and outside the lock, so a long measurement holds up no other key; two
  // threads that meet a new key at once may both decide, and the first to finish is kept. Entries
  // are never changed or erased: the reference stays valid for the life of the process.
  template <typename Decide>
  const Choice& decide(const Key& key, const Decide& decide) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = table_.find(key); it != table_.end()) return it->second;
    }
    Choice made;
    {
      runtime_pass::Unrecorded beside_the_pass;
      made = decide();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return table_.emplace(key, std::move(made)).first->second;
  }

  // The choice made for `key`, or null: nothing is measured.
  const Choice* find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = table_.find(key);
    return it == table_.end() ? nullptr : &it->second;
  }

  // visit(key, choice) for every choice made, in key order, under the lock (for reports).
  template <typename Visit>
  void for_each(const Visit& visit) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, choice] : table_) visit(key, choice);
  }

 private:
  mutable std::mutex mutex_;
  std::map<Key, Choice> table_;
};

}  // namespace memoplan::torch_ext

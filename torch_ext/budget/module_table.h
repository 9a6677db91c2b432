// A table of one shared state per planned module (by the id plan() registered it under), made once
// and never destroyed (deleters and late passes read it at exit); a module forgotten
// (forget_module) leaves it. No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace memoplan::torch_ext::budget {

template <typename T>
class ModuleTable {
 public:
  std::shared_ptr<T> find(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(id);
    return it == map_.end() ? nullptr : it->second;
  }
  void put(int64_t id, std::shared_ptr<T> value) {
    std::lock_guard<std::mutex> lock(mutex_);
    map_[id] = std::move(value);
  }
  // The state goes with its last holder (a pass of the module under way keeps it).
  void erase(int64_t id) {
    std::shared_ptr<T> gone;  // destroyed outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(id);
    if (it == map_.end()) return;
    gone = std::move(it->second);
    map_.erase(it);
  }
  std::vector<std::shared_ptr<T>> all() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::shared_ptr<T>> out;
    for (const auto& [id, value] : map_) out.push_back(value);
    return out;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int64_t, std::shared_ptr<T>> map_;
};

}  // namespace memoplan::torch_ext::budget

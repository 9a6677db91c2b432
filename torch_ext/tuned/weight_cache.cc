// The census and byte count over every WeightCache (weight_cache.h).
#include "weight_cache.h"

#include <atomic>

namespace memoplan::torch_ext::tuned {
namespace {

std::atomic<uint64_t> epoch{1};
std::mutex registry_mutex;
std::vector<WeightCacheBase*>& registry() {
  static auto* caches = new std::vector<WeightCacheBase*>();
  return *caches;
}
std::vector<WeightCacheBase*> all_caches() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry();
}

}  // namespace

WeightCacheBase::WeightCacheBase() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().push_back(this);
}

uint64_t census_epoch() { return epoch.load(std::memory_order_relaxed); }

void begin_census() { epoch.fetch_add(1, std::memory_order_relaxed); }

uint64_t end_census() {
  const uint64_t since = census_epoch();
  for (WeightCacheBase* cache : all_caches()) cache->drop_unused_since(since);
  return packed_bytes();
}

uint64_t packed_bytes() {
  uint64_t total = 0;
  for (WeightCacheBase* cache : all_caches()) total += cache->bytes();
  return total;
}

}  // namespace memoplan::torch_ext::tuned

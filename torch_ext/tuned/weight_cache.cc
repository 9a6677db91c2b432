// The sites and their owners, the census and the byte counts over every WeightCache
// (weight_cache.h).
#include "weight_cache.h"

#include <atomic>
#include <limits>

namespace memoplan::torch_ext::tuned {
namespace {

std::atomic<uint64_t> epoch{1};
std::mutex registry_mutex;  // the caches, the sites' owners and the censuses under way
std::vector<WeightCacheBase*>& registry() {
  static auto* caches = new std::vector<WeightCacheBase*>();
  return *caches;
}
std::vector<WeightCacheBase*> all_caches() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry();
}
// By site: its module (sites are numbered from 0 up, never reused). Never destroyed.
std::vector<int64_t>& site_modules() {
  static auto* owners = new std::vector<int64_t>();
  return *owners;
}
// By module: the epoch its census began in.
std::unordered_map<int64_t, uint64_t>& censuses() {
  static auto* started = new std::unordered_map<int64_t, uint64_t>();
  return *started;
}

thread_local int64_t owner = -1;

}  // namespace

RewriteOwner::RewriteOwner(int64_t module) : saved_(owner) { owner = module; }
RewriteOwner::~RewriteOwner() { owner = saved_; }
int64_t rewrite_owner() { return owner; }

int64_t new_site(int count) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<int64_t>& owners = site_modules();
  const auto first = static_cast<int64_t>(owners.size());
  owners.insert(owners.end(), static_cast<size_t>(count), owner);
  return first;
}

int64_t site_module(int64_t site) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const std::vector<int64_t>& owners = site_modules();
  return site >= 0 && static_cast<size_t>(site) < owners.size() ? owners[site] : -1;
}

WeightCacheBase::WeightCacheBase() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().push_back(this);
}

uint64_t census_epoch() { return epoch.load(std::memory_order_relaxed); }

void begin_census(int64_t module) {
  const uint64_t now = epoch.fetch_add(1, std::memory_order_relaxed) + 1;
  std::lock_guard<std::mutex> lock(registry_mutex);
  censuses()[module] = now;
}

uint64_t census_start(int64_t module) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = censuses().find(module);
  return it == censuses().end() ? 0 : it->second;
}

uint64_t end_census(int64_t module) {
  const uint64_t since = census_start(module);
  if (since > 0) {
    for (WeightCacheBase* cache : all_caches()) cache->drop_unused_since(since, module);
    std::lock_guard<std::mutex> lock(registry_mutex);
    censuses().erase(module);
  }
  return packed_bytes(module);
}

uint64_t packed_bytes(int64_t module) {
  uint64_t total = 0;
  for (WeightCacheBase* cache : all_caches()) total += cache->bytes(module);
  return total;
}

void forget_sites(int64_t module) {
  if (module < 0) return;
  for (WeightCacheBase* cache : all_caches()) {
    cache->drop_unused_since(std::numeric_limits<uint64_t>::max(), module);
  }
  std::lock_guard<std::mutex> lock(registry_mutex);
  censuses().erase(module);
}

}  // namespace memoplan::torch_ext::tuned

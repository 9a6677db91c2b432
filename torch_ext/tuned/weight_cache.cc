// The sites and their owners, the census and the byte counts over every WeightCache
// (weight_cache.h).
#include "weight_cache.h"

#include <atomic>
#include <limits>

#include "memoplan/onednn/onednn.h"

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
// By module, its census under way: the epoch it began in (this pass's) and the oneDNN primitives'
// epochs of its first pass and of this one (onednn.h: what the measurements made and the last
// pass did not ask for goes at its end).
struct Census {
  uint64_t epoch = 0, first_primitives = 0, last_primitives = 0;
};
std::unordered_map<int64_t, Census>& censuses() {
  static auto* started = new std::unordered_map<int64_t, Census>();
  return *started;
}

thread_local int64_t owner = -1;

std::atomic<uint64_t> resolutions{1};
std::atomic<size_t> censuses_under_way{0};  // censuses().size(), written under registry_mutex

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

uint64_t resolution_generation() { return resolutions.load(std::memory_order_acquire); }
void resolutions_changed() { resolutions.fetch_add(1, std::memory_order_acq_rel); }
bool census_under_way() { return censuses_under_way.load(std::memory_order_acquire) > 0; }

uint64_t census_epoch() { return epoch.load(std::memory_order_relaxed); }

void begin_census(int64_t module) {
  const uint64_t now = epoch.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t primitives = onednn::next_primitive_epoch();
  resolutions_changed();
  std::lock_guard<std::mutex> lock(registry_mutex);
  Census& census = censuses()[module];
  censuses_under_way.store(censuses().size(), std::memory_order_release);
  census.epoch = now;
  if (census.first_primitives == 0) census.first_primitives = primitives;
  census.last_primitives = primitives;
}

uint64_t census_start(int64_t module) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = censuses().find(module);
  return it == censuses().end() ? 0 : it->second.epoch;
}

uint64_t end_census(int64_t module) {
  Census census;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    const auto it = censuses().find(module);
    if (it != censuses().end()) census = it->second;
  }
  if (census.epoch > 0) {
    for (WeightCacheBase* cache : all_caches()) cache->drop_unused_since(census.epoch, module);
    // The primitives the module's passes made that its last pass did not ask for: measurement
    // candidates (another module's made meanwhile may go too: made again on use).
    onednn::forget_primitives(census.first_primitives, census.last_primitives);
    std::lock_guard<std::mutex> lock(registry_mutex);
    censuses().erase(module);
    censuses_under_way.store(censuses().size(), std::memory_order_release);
  }
  resolutions_changed();
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
  resolutions_changed();
  std::lock_guard<std::mutex> lock(registry_mutex);
  censuses().erase(module);
  censuses_under_way.store(censuses().size(), std::memory_order_release);
}

}  // namespace memoplan::torch_ext::tuned

#include "jemalloc_stats.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace memoplan::bench {
namespace {

// jemalloc 5.3's mutex names (an unknown name answers ENOENT and is skipped, so other versions
// read what they have).
const char* const kGlobalMutexes[] = {
    "background_thread", "max_per_bg_thd",   "ctl",       "prof", "prof_thds_data", "prof_dump",
    "prof_recent_alloc", "prof_recent_dump", "prof_stats"};
const char* const kArenaMutexes[] = {
    "large",          "extent_avail", "extents_dirty", "extents_muzzy", "extents_retained",
    "decay_dirty",    "decay_muzzy",  "base",          "tcache_list",   "hpa_shard",
    "hpa_shard_grow", "hpa_sec"};
constexpr unsigned kAllArenas = 4096;  // MALLCTL_ARENAS_ALL: the arenas' statistics merged

}  // namespace

JemallocMutexTotals JemallocMutexTotals::operator-(const JemallocMutexTotals& earlier) const {
  JemallocMutexTotals d;
  d.ops = ops - earlier.ops;
  d.waits = waits - earlier.waits;
  d.wait_ns = wait_ns - earlier.wait_ns;
  d.max_wait_ns = max_wait_ns;  // cumulative maximum: the later one covers both
  return d;
}

JemallocStats::JemallocStats() {
  mallctl_ = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  if (mallctl_) {
    // A jemalloc built without statistics has no "stats.mapped": treat it as absent.
    uint64_t probe = 0;
    refresh();
    if (!read_u64("stats.mapped", &probe)) mallctl_ = nullptr;
  }
}

void JemallocStats::refresh() const {
  uint64_t epoch = 1;
  size_t length = sizeof(epoch);
  mallctl_("epoch", &epoch, &length, &epoch, length);
}

// Reads a size_t, uint64_t or uint32_t statistic (jemalloc says how long it is).
bool JemallocStats::read_u64(const char* name, uint64_t* value) const {
  unsigned char buffer[8] = {};
  size_t length = sizeof(buffer);
  if (mallctl_(name, buffer, &length, nullptr, 0) != 0) return false;
  if (length == sizeof(uint64_t)) {
    std::memcpy(value, buffer, sizeof(uint64_t));
  } else if (length == sizeof(uint32_t)) {
    uint32_t v = 0;
    std::memcpy(&v, buffer, sizeof(v));
    *value = v;
  } else {
    return false;
  }
  return true;
}

void JemallocStats::add_mutex(const char* prefix, JemallocMutexTotals* totals) const {
  char name[160];
  uint64_t value = 0;
  std::snprintf(name, sizeof(name), "%s.num_ops", prefix);
  if (!read_u64(name, &value)) return;
  totals->ops += value;
  std::snprintf(name, sizeof(name), "%s.num_wait", prefix);
  if (read_u64(name, &value)) totals->waits += value;
  std::snprintf(name, sizeof(name), "%s.total_wait_time", prefix);
  if (read_u64(name, &value)) totals->wait_ns += value;
  std::snprintf(name, sizeof(name), "%s.max_wait_time", prefix);
  if (read_u64(name, &value)) totals->max_wait_ns = std::max(totals->max_wait_ns, value);
}

JemallocMemory JemallocStats::memory() const {
  JemallocMemory m;
  if (!mallctl_) return m;
  refresh();
  read_u64("stats.mapped", &m.mapped);
  read_u64("stats.active", &m.active);
  return m;
}

JemallocMutexTotals JemallocStats::mutexes() const {
  JemallocMutexTotals totals;
  if (!mallctl_) return totals;
  refresh();
  char prefix[128];
  for (const char* mutex : kGlobalMutexes) {
    std::snprintf(prefix, sizeof(prefix), "stats.mutexes.%s", mutex);
    add_mutex(prefix, &totals);
  }
  for (const char* mutex : kArenaMutexes) {
    std::snprintf(prefix, sizeof(prefix), "stats.arenas.%u.mutexes.%s", kAllArenas, mutex);
    add_mutex(prefix, &totals);
  }
  uint64_t bins = 0;
  if (read_u64("arenas.nbins", &bins)) {
    for (uint64_t bin = 0; bin < bins; ++bin) {
      std::snprintf(prefix, sizeof(prefix), "stats.arenas.%u.bins.%llu.mutex", kAllArenas,
                    static_cast<unsigned long long>(bin));
      add_mutex(prefix, &totals);
    }
  }
  return totals;
}

}  // namespace memoplan::bench

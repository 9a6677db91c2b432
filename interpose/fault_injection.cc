// Only in the fault-injection build of the engine (MEMOPLAN_FAULT_INJECTION); see the header.
#include "fault_injection.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace memoplan::shim::fault {
namespace {

// Fields are atomics: a test changes rules while other threads allocate.
struct SiteState {
  std::atomic<uint64_t> every_nth{0};
  std::atomic<uint32_t> per_million{0};
  std::atomic<uint64_t> seed{1};
  std::atomic<uint64_t> skip{0};
  std::atomic<uint64_t> max_failures{0};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> failures{0};
};
SiteState sites[static_cast<int>(Site::kCount)];  // constant-initialized: usable before main

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

SiteState& state(Site site) { return sites[static_cast<int>(site)]; }

std::atomic<void (*)(Point)> pause_hook{nullptr};

}  // namespace

const char* to_string(Site site) {
  switch (site) {
    case Site::kFallbackAlloc:
      return "fallback_alloc";
    case Site::kTagRegion:
      return "tag_region";
    case Site::kTagCommit:
      return "tag_commit";
    case Site::kSlabCommit:
      return "slab_commit";
    case Site::kCount:
      break;
  }
  return "?";
}

bool should_fail(Site site) {
  SiteState& s = state(site);
  const uint64_t every = s.every_nth.load(std::memory_order_relaxed);
  const uint32_t ppm = s.per_million.load(std::memory_order_relaxed);
  if (!every && !ppm) return false;  // no rule: not even counted
  const uint64_t n = s.calls.fetch_add(1, std::memory_order_relaxed);
  const uint64_t skip = s.skip.load(std::memory_order_relaxed);
  if (n < skip) return false;
  bool fail = every && (n - skip + 1) % every == 0;
  if (!fail && ppm) fail = mix(s.seed.load(std::memory_order_relaxed) ^ mix(n)) % 1000000 < ppm;
  if (!fail) return false;
  return s.failures.fetch_add(1, std::memory_order_relaxed) <
         s.max_failures.load(std::memory_order_relaxed);
}

void set_rule(Site site, const Rule& rule) {
  SiteState& s = state(site);
  s.every_nth.store(0, std::memory_order_relaxed);  // off while the fields change
  s.per_million.store(0, std::memory_order_relaxed);
  s.seed.store(rule.seed, std::memory_order_relaxed);
  s.skip.store(rule.skip, std::memory_order_relaxed);
  s.max_failures.store(rule.max_failures, std::memory_order_relaxed);
  s.calls.store(0, std::memory_order_relaxed);
  s.failures.store(0, std::memory_order_relaxed);
  s.per_million.store(rule.per_million, std::memory_order_relaxed);
  s.every_nth.store(rule.every_nth, std::memory_order_relaxed);
}

void clear_rules() {
  for (int i = 0; i < static_cast<int>(Site::kCount); ++i) set_rule(static_cast<Site>(i), Rule{});
}

uint64_t calls(Site site) { return state(site).calls.load(std::memory_order_relaxed); }

uint64_t injected(Site site) {
  const SiteState& s = state(site);
  const uint64_t failures = s.failures.load(std::memory_order_relaxed);
  const uint64_t most = s.max_failures.load(std::memory_order_relaxed);
  return failures < most ? failures : most;
}

void set_pause_hook(void (*hook)(Point)) { pause_hook.store(hook, std::memory_order_release); }

void pause_at(Point point) {
  if (void (*hook)(Point) = pause_hook.load(std::memory_order_acquire)) hook(point);
}

void parse_rules(const char* text) {
  if (!text) return;
  // "site:key=value;key=value,site:..."; parsed in place on a copy, no malloc.
  char buffer[512];
  const size_t length = strlen(text);
  if (length >= sizeof buffer) return;
  memcpy(buffer, text, length + 1);
  char* save_item = nullptr;
  for (char* item = strtok_r(buffer, ",", &save_item); item;
       item = strtok_r(nullptr, ",", &save_item)) {
    char* colon = strchr(item, ':');
    if (!colon) continue;
    *colon = '\0';
    int site = 0;
    while (site < static_cast<int>(Site::kCount) &&
           strcmp(item, to_string(static_cast<Site>(site))))
      ++site;
    if (site == static_cast<int>(Site::kCount)) continue;
    Rule rule;
    char* save_field = nullptr;
    for (char* field = strtok_r(colon + 1, ";", &save_field); field;
         field = strtok_r(nullptr, ";", &save_field)) {
      char* equals = strchr(field, '=');
      if (!equals) continue;
      *equals = '\0';
      const uint64_t value = strtoull(equals + 1, nullptr, 10);
      if (!strcmp(field, "every")) rule.every_nth = value;
      if (!strcmp(field, "ppm")) rule.per_million = static_cast<uint32_t>(value);
      if (!strcmp(field, "seed")) rule.seed = value;
      if (!strcmp(field, "skip")) rule.skip = value;
      if (!strcmp(field, "max")) rule.max_failures = value;
    }
    set_rule(static_cast<Site>(site), rule);
  }
}

}  // namespace memoplan::shim::fault

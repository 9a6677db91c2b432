#include "arena_region.h"

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {
namespace {

replay::SharedCounters arena_counters;  // remote frees, late releases, map failures

}  // namespace

replay::ArenaRegion& arena_region() {
  static replay::ArenaRegion* region = [] {
    auto* r = new replay::ArenaRegion();
    replay::ArenaRegion::Config config;
    config.largest_shift = 32;
    config.smallest_shift = 24;
    config.shift_step = 2;
    config.arenas = 1024;  // alive at once: threads x plans
    r->reserve(config);
    r->set_counters(&arena_counters);
    return r;
  }();
  return *region;
}

const void* thread_token() {
  static thread_local char token;
  return &token;
}

}  // namespace memoplan::torch_ext

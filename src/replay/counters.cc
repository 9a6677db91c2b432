#include "memoplan/replay/counters.h"

namespace memoplan::replay {
const char* to_string(Fallback reason) {
  switch (reason) {
    case Fallback::kNotPlanned:
      return "not_planned";
    case Fallback::kEscaping:
      return "escaping";
    case Fallback::kOverlap:
      return "overlap";
    case Fallback::kAlignment:
      return "alignment";
    case Fallback::kGuardFull:
      return "guard_full";
    case Fallback::kCount:
      break;
  }
  return "?";
}

uint64_t Counters::all_fallbacks() const {
  uint64_t sum = 0;
  for (uint64_t f : fallbacks) sum += f;
  return sum;
}

Counters& Counters::operator+=(const Counters& other) {
#define MEMOPLAN_COUNTER_FIELD(name) name += other.name;
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  for (int r = 0; r < kFallbackKinds; ++r) fallbacks[r] += other.fallbacks[r];
  return *this;
}

Counters operator-(const Counters& after, const Counters& before) {
  Counters d;
#define MEMOPLAN_COUNTER_FIELD(name) d.name = after.name - before.name;
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  for (int r = 0; r < kFallbackKinds; ++r)
    d.fallbacks[r] = after.fallbacks[r] - before.fallbacks[r];
  return d;
}

void SharedCounters::add(const Counters& c) {
#define MEMOPLAN_COUNTER_FIELD(name) \
  if (c.name) bump(name, c.name);
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  for (int r = 0; r < kFallbackKinds; ++r) {
    if (c.fallbacks[r]) bump(fallbacks[r], c.fallbacks[r]);
  }
}

Counters CounterCells::load() const {
  Counters c;
#define MEMOPLAN_COUNTER_FIELD(name) c.name = name.load(std::memory_order_relaxed);
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  for (int r = 0; r < kFallbackKinds; ++r) {
    c.fallbacks[r] = fallbacks[r].load(std::memory_order_relaxed);
  }
  return c;
}

Counters OwnedCounters::take() {
  Counters c = load();
#define MEMOPLAN_COUNTER_FIELD(name) name.store(0, std::memory_order_relaxed);
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  for (auto& f : fallbacks) f.store(0, std::memory_order_relaxed);
  return c;
}

}  // namespace memoplan::replay

#include "options.h"

#include <cstdio>
#include <cstring>

namespace memoplan::shim {
namespace {

enum class Kind { kMode, kFallback, kSize, kCount, kBool, kPath };

struct OptionInfo {
  const char* name;
  Kind kind;
  size_t offset;
  const char* doc;
};

#define MEMOPLAN_FIELD(f) offsetof(Options, f)
const OptionInfo kOptionTable[] = {
    {"mode", Kind::kMode, MEMOPLAN_FIELD(mode), "off | auto | profile | replay"},
    {"fallback", Kind::kFallback, MEMOPLAN_FIELD(fallback), "auto | next | mimalloc | jemalloc"},
    {"min_size", Kind::kSize, MEMOPLAN_FIELD(min_size), "plan only requests this large (bytes)"},
    {"passes", Kind::kCount, MEMOPLAN_FIELD(passes), "warm-up passes before profiling"},
    {"threads", Kind::kCount, MEMOPLAN_FIELD(threads), "threads that may get a slab"},
    {"callsite_depth", Kind::kCount, MEMOPLAN_FIELD(callsite_depth), "frames in the key"},
    {"slab_max", Kind::kSize, MEMOPLAN_FIELD(slab_max), "largest slab per thread (bytes)"},
    {"max_period", Kind::kCount, MEMOPLAN_FIELD(max_period), "longest detectable pass"},
    {"idle_release", Kind::kCount, MEMOPLAN_FIELD(idle_release),
     "ms a slab may sit idle before its pages go back (0: never)"},
    {"profile_keep", Kind::kSize, MEMOPLAN_FIELD(profile_keep),
     "bytes of freed profiled blocks kept for the next (0: none)"},
    {"detect", Kind::kBool, MEMOPLAN_FIELD(detect), "find passes automatically"},
    {"huge_pages", Kind::kBool, MEMOPLAN_FIELD(huge_pages), "transparent huge pages for slabs"},
    {"stats_print", Kind::kBool, MEMOPLAN_FIELD(stats_print), "print statistics at exit"},
    {"verbose", Kind::kBool, MEMOPLAN_FIELD(verbose), "log detections, plans, re-detections"},
    {"log", Kind::kPath, MEMOPLAN_FIELD(log_path), "log file instead of stderr"},
    {"trace", Kind::kPath, MEMOPLAN_FIELD(trace_path), "trace file (profile writes, replay reads)"},
    {"plan", Kind::kPath, MEMOPLAN_FIELD(plan_path), "plan file for mode:replay"},
    {"stats_file", Kind::kPath, MEMOPLAN_FIELD(stats_file),
     "statistics as JSON, rewritten while running and at exit (%p: process id)"},
    {"stats_interval_ms", Kind::kCount, MEMOPLAN_FIELD(stats_interval_ms),
     "ms between rewrites of stats_file (0: only at exit)"},
};
#undef MEMOPLAN_FIELD

void warnf(void (*warn)(const char*), const char* format, const char* a, const char* b) {
  char line[256];
  snprintf(line, sizeof line, format, a, b);
  warn(line);
}

// "4096", "64k", "1M", "2g" (binary units).
bool parse_size(const char* text, uint64_t& out) {
  if (!*text) return false;
  uint64_t value = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    if (value > (UINT64_MAX - 9) / 10) return false;
    value = value * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (p == text) return false;
  unsigned shift = 0;
  switch (*p) {
    case 'k':
    case 'K':
      shift = 10;
      ++p;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++p;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++p;
      break;
    default:
      break;
  }
  if (*p == 'b' || *p == 'B') ++p;
  if (*p || (shift && value > (UINT64_MAX >> shift))) return false;
  out = value << shift;
  return true;
}

bool apply(const OptionInfo& info, const char* value, Options& out) {
  char* field = reinterpret_cast<char*>(&out) + info.offset;
  switch (info.kind) {
    case Kind::kMode: {
      static const struct {
        const char* name;
        Mode mode;
      } modes[] = {{"off", Mode::kOff},
                   {"auto", Mode::kAuto},
                   {"profile", Mode::kProfile},
                   {"replay", Mode::kReplay}};
      for (const auto& m : modes) {
        if (!strcmp(value, m.name)) {
          *reinterpret_cast<Mode*>(field) = m.mode;
          return true;
        }
      }
      return false;
    }
    case Kind::kFallback: {
      constexpr FallbackKind kKinds[] = {FallbackKind::kAuto, FallbackKind::kNext,
                                         FallbackKind::kMimalloc, FallbackKind::kJemalloc};
      for (FallbackKind kind : kKinds) {
        if (!strcmp(value, to_string(kind))) {
          *reinterpret_cast<FallbackKind*>(field) = kind;
          return true;
        }
      }
      return false;
    }
    case Kind::kSize:
    case Kind::kCount: {
      uint64_t v = 0;
      if (!parse_size(value, v)) return false;
      if (info.kind == Kind::kCount && strpbrk(value, "kKmMgGbB")) return false;
      *reinterpret_cast<uint64_t*>(field) = v;
      return true;
    }
    case Kind::kBool:
      if (!strcmp(value, "true") || !strcmp(value, "1"))
        *reinterpret_cast<bool*>(field) = true;
      else if (!strcmp(value, "false") || !strcmp(value, "0"))
        *reinterpret_cast<bool*>(field) = false;
      else
        return false;
      return true;
    case Kind::kPath: {
      const size_t n = strlen(value);
      if (n == 0 || n >= kPathCapacity) return false;
      memcpy(field, value, n + 1);
      return true;
    }
  }
  return false;
}

// Checks that need several options at once; a violation restores the default.
void check_combination(Options& out, void (*warn)(const char*)) {
  const Options defaults;
  if (out.slab_max < 4096 || (out.slab_max & (out.slab_max - 1)) || out.slab_max > (1ull << 40)) {
    warn("memoplan: slab_max must be a power of two between 4k and 1T; using 1g");
    out.slab_max = defaults.slab_max;
  }
  if (out.threads == 0 || out.threads > 4096) {
    warn("memoplan: threads must be 1..4096; using 64");
    out.threads = defaults.threads;
  }
  if (out.callsite_depth > 16) {
    warn("memoplan: callsite_depth must be 0..16; using 4");
    out.callsite_depth = defaults.callsite_depth;
  }
  if (out.stats_interval_ms && !out.stats_file[0]) {
    warn("memoplan: stats_interval_ms needs stats_file; writing no statistics file");
    out.stats_interval_ms = defaults.stats_interval_ms;
  }
  if (out.min_size < 16) out.min_size = 16;  // a freed slab block holds a link (remote frees)
}

}  // namespace

void parse_options(const char* conf, Options& out, void (*warn)(const char*)) {
  if (conf) {
    char buffer[2048];
    const size_t length = strlen(conf);
    if (length >= sizeof buffer) {
      warn("memoplan: MEMOPLAN_CONF is longer than 2047 characters; ignoring it");
    } else {
      memcpy(buffer, conf, length + 1);
      char* save = nullptr;
      for (char* item = strtok_r(buffer, ",", &save); item; item = strtok_r(nullptr, ",", &save)) {
        char* colon = strchr(item, ':');
        if (!colon) {
          warnf(warn, "memoplan: MEMOPLAN_CONF item '%s' is not key:value; ignored%s", item, "");
          continue;
        }
        *colon = '\0';
        const char* value = colon + 1;
        const OptionInfo* info = nullptr;
        for (const OptionInfo& o : kOptionTable) {
          if (!strcmp(o.name, item)) info = &o;
        }
        if (!info) {
          warnf(warn, "memoplan: unknown MEMOPLAN_CONF key '%s'%s; ignored", item, "");
        } else if (!apply(*info, value, out)) {
          warnf(warn, "memoplan: bad value '%s' for MEMOPLAN_CONF key '%s'; keeping the default",
                value, item);
        }
      }
    }
  }
  check_combination(out, warn);
}

const char* to_string(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "off";
    case Mode::kAuto:
      return "auto";
    case Mode::kProfile:
      return "profile";
    case Mode::kReplay:
      return "replay";
  }
  return "?";
}

const char* to_string(FallbackKind kind) {
  switch (kind) {
    case FallbackKind::kAuto:
      return "auto";
    case FallbackKind::kNext:
      return "next";
    case FallbackKind::kJemalloc:
      return "jemalloc";
    case FallbackKind::kMimalloc:
      return "mimalloc";
  }
  return "?";
}

size_t describe_options(const Options& o, char* buf, size_t size) {
  const int n = snprintf(
      buf, size,
      "mode:%s,fallback:%s,min_size:%llu,passes:%llu,threads:%llu,callsite_depth:%llu,"
      "slab_max:%llu,max_period:%llu,idle_release:%llu,profile_keep:%llu,detect:%s,huge_pages:%s,"
      "stats_print:%s,verbose:%s",
      to_string(o.mode), to_string(o.fallback), static_cast<unsigned long long>(o.min_size),
      static_cast<unsigned long long>(o.passes), static_cast<unsigned long long>(o.threads),
      static_cast<unsigned long long>(o.callsite_depth),
      static_cast<unsigned long long>(o.slab_max), static_cast<unsigned long long>(o.max_period),
      static_cast<unsigned long long>(o.idle_release),
      static_cast<unsigned long long>(o.profile_keep), o.detect ? "true" : "false",
      o.huge_pages ? "true" : "false", o.stats_print ? "true" : "false",
      o.verbose ? "true" : "false");
  if (n < 0) return 0;
  size_t written = static_cast<size_t>(n) < size ? static_cast<size_t>(n) : size - 1;
  if (o.mode == Mode::kProfile || o.mode == Mode::kReplay) {
    const int m = snprintf(buf + written, size - written, ",trace:%s%s%s", o.trace_path,
                           o.plan_path[0] ? ",plan:" : "", o.plan_path);
    if (m > 0) written += static_cast<size_t>(m) < size - written ? m : size - written - 1;
  }
  if (o.stats_file[0]) {
    const int m = snprintf(buf + written, size - written, ",stats_file:%s,stats_interval_ms:%llu",
                           o.stats_file, static_cast<unsigned long long>(o.stats_interval_ms));
    if (m > 0) written += static_cast<size_t>(m) < size - written ? m : size - written - 1;
  }
  return written;
}

}  // namespace memoplan::shim

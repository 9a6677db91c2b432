// Fuzz target: MEMOPLAN_CONF strings (the LD_PRELOAD shim's parse_options, which runs inside the
// host's first malloc, so it must never crash, overrun a buffer or leave an option out of range).
// The input is the environment variable's value up to its first NUL.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "options.h"

namespace {

using memoplan::shim::Options;

// Every warning is one line that fits the parser's buffer.
void check_warning(const char* message) {
  const size_t length = strnlen(message, 4096);
  FUZZ_CHECK(length > 0 && length < 256, "warning of %zu characters", length);
}

bool terminated(const char* field) { return memchr(field, '\0', memoplan::shim::kPathCapacity); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string conf(reinterpret_cast<const char*>(data), size);  // c_str() ends at a NUL
  Options options;
  memoplan::shim::parse_options(conf.c_str(), options, check_warning);

  const uint64_t slab_max = options.slab_max;
  FUZZ_CHECK(slab_max >= 4096 && slab_max <= (uint64_t{1} << 40) && !(slab_max & (slab_max - 1)),
             "slab_max %llu", static_cast<unsigned long long>(slab_max));
  FUZZ_CHECK(options.threads >= 1 && options.threads <= 4096, "threads %llu",
             static_cast<unsigned long long>(options.threads));
  FUZZ_CHECK(options.callsite_depth <= 16, "callsite_depth %llu",
             static_cast<unsigned long long>(options.callsite_depth));
  FUZZ_CHECK(options.min_size >= 16, "min_size %llu",
             static_cast<unsigned long long>(options.min_size));
  FUZZ_CHECK(terminated(options.log_path) && terminated(options.trace_path) &&
                 terminated(options.plan_path),
             "a path is not NUL-terminated");
  const int mode = static_cast<int>(options.mode);
  FUZZ_CHECK(mode >= 0 && mode <= static_cast<int>(memoplan::shim::Mode::kReplay), "mode %d", mode);

  // describe_options (stats_print) into buffers large and small: always terminated, never more.
  for (size_t capacity : {size_t{1}, size_t{2}, size_t{40}, size_t{200}, size_t{2048}}) {
    std::string buffer(capacity + 16, '\x7f');
    const size_t written = memoplan::shim::describe_options(options, buffer.data(), capacity);
    FUZZ_CHECK(written < capacity, "wrote %zu into %zu", written, capacity);
    FUZZ_CHECK(buffer[written] == '\0', "not terminated at %zu", written);
    FUZZ_CHECK(buffer.find_first_not_of('\x7f', capacity) == std::string::npos,
               "wrote past %zu bytes", capacity);
  }

  // What describe_options prints reads back as the same options (it leaves out log; the paths
  // only when a mode uses them, and a path with a comma cannot round-trip).
  char described[4096];
  memoplan::shim::describe_options(options, described, sizeof described);
  const bool comma_in_path = strchr(options.trace_path, ',') || strchr(options.plan_path, ',');
  if (!comma_in_path && !strstr(described, "plan:,")) {
    Options reread;
    memoplan::shim::parse_options(described, reread, check_warning);
    FUZZ_CHECK(reread.mode == options.mode && reread.min_size == options.min_size &&
                   reread.passes == options.passes && reread.threads == options.threads &&
                   reread.slab_max == options.slab_max && reread.detect == options.detect &&
                   reread.callsite_depth == options.callsite_depth &&
                   reread.max_period == options.max_period &&
                   reread.profile_keep == options.profile_keep,
               "described as '%s', read back differently", described);
  }
  return 0;
}

// MEMOPLAN_CONF: "key:value,key:value", parsed once without allocating (like MALLOC_CONF).
// A bad key or value prints one line on stderr and keeps the default; nothing aborts the host.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memoplan::shim {

enum class Mode {
  kOff,      // pass-through to the fallback
  kAuto,     // profile, plan in-process, replay
  kProfile,  // profile one pass per thread and write it as a trace file; otherwise pass-through
  kReplay,   // replay a pass recorded by mode:profile (and optionally planned offline)
};
inline constexpr size_t kPathCapacity = 512;
// Where the requests the shim does not plan go (fallback.h): kAuto is kNext when an allocator
// other than glibc's is next in the chain (the user composed one), else mimalloc when
// libmimalloc.so.2 loads (not Debian 13's mimalloc 3: fallback.cc), else glibc.
enum class FallbackKind { kAuto, kNext, kJemalloc, kMimalloc };

struct Options {
  Mode mode = Mode::kAuto;
  FallbackKind fallback = FallbackKind::kAuto;
  uint64_t min_size = 4096;        // bytes; smaller requests stay with the fallback allocator
  uint64_t passes = 2;             // warm-up passes before the profiled one (explicit API)
  uint64_t threads = 64;           // threads that may get a slab
  uint64_t callsite_depth = 4;     // call-site key: 0 size only, 1 return address + stack pointer,
                                   // N >= 2: N frames from libunwind (cached per thread)
  uint64_t slab_max = 1ull << 30;  // largest slab per thread, bytes (power of two)
  uint64_t max_period = 1 << 16;   // longest pass (allocations) automatic detection looks for
  uint64_t idle_release = 10000;  // ms without a placement after which a slab's pages go (0: never)
  // Bytes of freed profiled blocks kept mapped for the next ones while profiling (0: each free
  // unmaps its block: the lowest peak RSS, profiled passes several times slower; engine.cc).
  uint64_t profile_keep = uint64_t{32} << 20;
  uint64_t stats_interval_ms = 0;  // rewrite stats_file every this many ms (0: only at exit)
  bool detect = true;              // find passes automatically when the program does not mark them
  bool huge_pages = true;          // ask for transparent huge pages on slabs of 2 MiB or more
  bool stats_print = false;        // print statistics at exit
  bool verbose = false;            // log every detection, plan and re-detection as it happens
  char log_path[kPathCapacity] = "";  // messages go here instead of stderr
  // mode:profile writes here (%p: process id, %t: thread index); mode:replay reads from here.
  char trace_path[kPathCapacity] = "memoplan-%p-%t.trace.json.gz";
  char plan_path[kPathCapacity] = "";  // mode:replay: offsets planned offline (else in-process)
  // The statistics as JSON (memoplan_stats_json), rewritten whole (PATH.tmp, then a rename) every
  // stats_interval_ms and once at exit; %p: process id, %%: a percent sign. Empty: no file.
  char stats_file[kPathCapacity] = "";
};

// Parses `conf` into `out`; reports problems through `warn` (one call per problem).
void parse_options(const char* conf, Options& out, void (*warn)(const char* message));

// Appends "key:value,..." of every option to buf (for stats_print). Returns chars written.
size_t describe_options(const Options& options, char* buf, size_t size);

const char* to_string(Mode mode);
const char* to_string(FallbackKind kind);

// mode:profile and mode:replay match allocations across processes, so their call-site keys must
// not depend on where ASLR put the code.
inline bool portable_keys(const Options& options) {
  return options.mode == Mode::kProfile || options.mode == Mode::kReplay;
}

}  // namespace memoplan::shim

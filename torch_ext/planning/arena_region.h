// The extension's arenas: one replay::ArenaRegion for the process (the runtime's arena, the same
// code the shim replays with), one arena per (thread, plan) a thread has used. No torch headers.
#pragma once

#include "memoplan/replay/arena.h"

namespace memoplan::torch_ext {

// Reserved on first use (4 GiB per arena, less where the address space is short: ThreadSanitizer,
// ulimit -v; a plan larger than an arena runs unplanned); never destroyed: deleters run at exit.
replay::ArenaRegion& arena_region();
// The calling thread's token, the owner of the arenas it creates.
const void* thread_token();

}  // namespace memoplan::torch_ext

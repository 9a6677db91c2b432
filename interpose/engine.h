// The shim's allocation entry points, called by the exported malloc family (exports.cc). Each
// decides: pass-through, profile, or replay. Profiling and replay details live in their own files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "state.h"

namespace memoplan::shim {

void* engine_alloc(size_t size, size_t alignment, bool zero);
void engine_free(void* p);
void* engine_realloc(void* p, size_t size);
size_t engine_usable_size(void* p);
void engine_pass_begin();
void engine_pass_end();

// profile.cc
void* profile_alloc(ThreadState& t, size_t size, uint64_t key);
void profile_free(void* p);
size_t profile_usable_size(void* p);
void profile_maybe_detect(ThreadState& t);

// replay.cc
void* replay_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key);
void slab_free(void* p);
size_t slab_usable_size(void* p);
void drain_remote_frees(ThreadState& t);

// plan_builder.cc: plans records [first, first + count) whose lifetimes end by `cut_tick`
// (later ends escape) and switches the thread to replay with the pass position `cursor`.
bool build_replay(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                  uint32_t cursor);

// callsite.cc
uint64_t callsite_key(size_t size, unsigned depth);

}  // namespace memoplan::shim

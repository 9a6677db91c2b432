// Huge requests the shim does not plan, kept off a fallback that maps and unmaps them. mimalloc 2
// gives each block over 16 MiB (its MI_LARGE_OBJ_SIZE_MAX) a segment of its own, returned to the
// kernel at free, and blocks of several MiB a 32 MiB segment each few, freed when it empties: an
// mmap, a munmap, a TLB shootdown and fresh page faults per block. bench/large_blocks (random
// 5-25 MiB blocks) took mimalloc 4-5x glibc's time, the shim with mimalloc behind as long
// (docs/results/SHIM.md). Blocks of `huge_from` bytes or more (4 MiB behind mimalloc) take a slot
// of the tag region instead (record::TagRegion: one block a slot, found at free by the range
// check free already makes). A freed slot keeps its pages for the next block of a near size while
// the region's kept bytes stay within max(its base allowance, the bytes of live huge blocks): the
// cache never holds more than the huge blocks in use (a general allocator's heap may hold all it
// ever held), and it goes back at malloc_trim, when a plan is installed and, for slots of 16 MiB
// or more, 10 ms after the free (kKeptLargeNs, engine.h: the live huge bytes counted a model's
// weights, 465 MiB in gpt_decoder, so the allowance alone kept a freed output beside the slabs).
//
// Behind mimalloc and jemalloc (fallback::maps_each_large_block; jemalloc alone 4.3x glibc's
// time): glibc (its mmap threshold rises to 32 MiB after a free) and tcmalloc keep freed large
// blocks themselves (1.13x and 1.56x glibc behind the shim; the region: 1.02x). calloc stays
// with the fallback (its fresh pages are zero; a kept slot would be cleared page by page). A
// request the region cannot take (over the tag budget, larger than a slot, a failed map) goes to
// the fallback as before.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memoplan::shim {

// Requests of this size or more are huge: the region's (behind mimalloc and jemalloc). Escaping
// blocks this large give their pages back when freed (replay.cc), as a general allocator's are.
constexpr size_t kHugeRequest = size_t{4} << 20;

// Set once at initialization (engine.cc), before the exported functions are published: requests of
// `from` bytes or more are huge (0: none); `base_retain`, the region's kept bytes without them.
void set_huge_blocks(size_t from, uint64_t base_retain);
// A huge block for a request of `size` bytes aligned to `alignment` that the fallback would serve
// (zero: calloc's); nullptr when the rule does not apply or the region cannot take it.
void* huge_alloc(size_t size, size_t alignment, bool zero);
// Frees p when it is a huge block (a slot of the tag region that profiling did not record).
bool huge_free(void* p);
// realloc of a huge block to `size` bytes in place (its slot has room up to the slot's size:
// growing maps pages, no copy); false when p is not a huge block, `size` is below huge_from or
// under half its size (it moves, and its pages past the new size go back), or the pages cannot be
// mapped.
bool huge_resize(void* p, size_t size);

}  // namespace memoplan::shim

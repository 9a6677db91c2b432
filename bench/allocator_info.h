// Which allocator serves this process: for benchmarks that run under LD_PRELOAD and must say
// what they measured.
#ifndef MEMOPLAN_BENCH_ALLOCATOR_INFO_H_
#define MEMOPLAN_BENCH_ALLOCATOR_INFO_H_

#include <string>
#include <vector>

namespace memoplan::bench {

// The shared objects that define malloc, in symbol search order: the first one serves malloc,
// the next is what a shim (or a counter) in front of it forwards to. E.g.
// {"libmemoplan_preload.so", "libjemalloc.so.2", "libc.so.6"}.
std::vector<std::string> malloc_chain();

// The chain joined with " -> ".
std::string malloc_chain_text();

// The allocators loaded, with versions where they tell: e.g. "memoplan-shim jemalloc-5.3.0-0-g…
// glibc-2.36".
std::string allocator_versions();

}  // namespace memoplan::bench

#endif  // MEMOPLAN_BENCH_ALLOCATOR_INFO_H_

// The unwind tables' pages, given back after unwinds. To key a request by its call path
// (callsite_depth >= 2, portable keys) libunwind reads the .eh_frame_hdr and .eh_frame of every
// library the path passes through. Each page it touches is mapped into the process, with the
// kernel's fault-around up to 16 pages a fault, and stayed mapped: 3.6 MiB of a torch process's
// RSS at callsite_depth 4 (docs/results/SHIM.md). Those pages are the library file's own, never
// written, so dropping them from the process loses nothing: the next read maps them again from the
// page cache. So the tables of the libraries that unwinds passed through are dropped, every 16
// unwinds of a thread (callsite_cache.h): what the unwinder holds in RSS is those unwinds' pages.
#pragma once

#include <cstdint>

namespace memoplan::shim {

// For each library that holds one of `addresses` (return addresses just unwound), MADV_DONTNEED
// over its unwind tables: from the page of .eh_frame_hdr (or of .eh_frame, if that lies before it)
// to the last whole page of the read-only segment that holds them (.gcc_except_table follows them
// there). Never a writable or RELRO page (those may hold the loader's relocations, which dropping
// would undo), never a library with text relocations, never the vDSO. Does not allocate; takes the
// loader's lock (dl_iterate_phdr), so it runs where an unwind may (callsite.cc's UnwindGate).
void release_unwind_tables(const uintptr_t* addresses, unsigned count);

}  // namespace memoplan::shim

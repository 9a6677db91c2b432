// The program's C++ runtime, as the exported operator new must use it. The preloaded library
// carries a copy of libstdc++ of its own, linked statically and hidden (interpose/CMakeLists.txt:
// a C program then maps no libstdc++.so, whose loading made most of the shim's fixed resident
// cost: bench/run_shim_programs.py's sqlite3 38.9 -> 38.1 MiB peak RSS). Two runtimes in one
// process each keep their own new-handler and their own count of exceptions in flight, so what
// operator new does for the program goes to the program's runtime (libstdc++.so.6 when the process
// has loaded it, in any scope), and the shim's own code (under ReentryGuard: the planner, the trace
// reader) keeps to its copy:
// - the new-handler called is the one the program installed (std::set_new_handler);
// - the program's std::bad_alloc is thrown by its runtime, so its catch finds its counts right;
// - a nothrow operator new whose handler throws is caught by the program's runtime too
//   (libstdc++'s nothrow forms call the throwing one and catch).
// Built without the static copy (sanitizer builds), each of these is the one runtime's.
#pragma once

#include <cstddef>
#include <new>

namespace memoplan::shim::host_cxx {

// The program's new-handler; nullptr when none is installed.
std::new_handler new_handler();
// Throws std::bad_alloc from the program's runtime.
[[noreturn]] void throw_bad_alloc();
// The program's nothrow operator new for `size` bytes (`alignment` past 16: the aligned form),
// which calls the exported throwing one and returns nullptr where it throws; nullptr when the
// process has no such runtime.
void* nothrow_new(size_t size, size_t alignment);

}  // namespace memoplan::shim::host_cxx

// Behaviour programs rely on from glibc and libstdc++ that a malloc replacement must keep. CTest
// runs this program twice: without the shim (the control: every check holds for glibc) and with
// it (the shim must agree). Built also as a module (COMPAT_MODULE: compat_checks() and no main)
// that dlopen_local.c loads RTLD_LOCAL, as Python loads an extension: its libstdc++ is then
// outside the global scope, and the shim's own copy of libstdc++ (interpose/host_cxx.h) must
// still call this program's new-handler and throw into this program's runtime.
#include <malloc.h>

#include <cstdint>
#include <exception>
#include <new>

#include "program_check.h"

namespace {

// Unlike CHECK, goes on after a failure: each check here is a separate promise.
int failures = 0;
#define EXPECT(cond)                                                            \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

int handler_calls = 0;

// A new-handler that gives up after its first call, so a failing operator new ends in bad_alloc.
void give_up_handler() {
  ++handler_calls;
  std::set_new_handler(nullptr);
}

// One that throws bad_alloc itself, as [new.handler] allows.
void throwing_handler() {
  ++handler_calls;
  throw std::bad_alloc();
}

// glibc's memalign rounds an alignment that is not a power of two up to one, and takes 0 as
// "no particular alignment"; only posix_memalign and aligned_alloc reject such alignments.
void check_memalign_rounds_alignment_up() {
  void* p = memalign(24, BIG);
  if (!p) fprintf(stderr, "memalign(24, %d) returned NULL\n", BIG);
  EXPECT(p != nullptr && reinterpret_cast<uintptr_t>(p) % 32 == 0);
  free(p);
  p = memalign(0, 100);
  if (!p) fprintf(stderr, "memalign(0, 100) returned NULL\n");
  EXPECT(p != nullptr);
  free(p);
  p = memalign(3000, BIG);
  EXPECT(p != nullptr && reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  free(p);
}

// [new.delete.single]: a failing operator new calls the installed new-handler (which may free
// memory and let it retry) before it throws; the nothrow forms too, then return null.
void check_new_calls_the_new_handler() {
  volatile size_t huge = SIZE_MAX / 2;  // hidden from the compiler's size warnings
  handler_calls = 0;
  std::set_new_handler(give_up_handler);
  bool threw = false;
  try {
    ::operator delete(::operator new(huge));
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (handler_calls != 1) fprintf(stderr, "new: the new-handler ran %d times\n", handler_calls);
  EXPECT(threw && handler_calls == 1);
  // The exception was this program's runtime's: caught, none is left in flight.
  EXPECT(std::uncaught_exceptions() == 0);

  handler_calls = 0;
  std::set_new_handler(give_up_handler);
  EXPECT(::operator new[](huge, std::align_val_t{64}, std::nothrow) == nullptr);
  if (handler_calls != 1) {
    fprintf(stderr, "aligned nothrow new[]: the new-handler ran %d times\n", handler_calls);
  }
  EXPECT(handler_calls == 1);

  // A nothrow form whose handler throws returns null ([new.delete.single] p8).
  handler_calls = 0;
  std::set_new_handler(throwing_handler);
  EXPECT(::operator new(huge, std::nothrow) == nullptr);
  EXPECT(::operator new (huge, std::align_val_t{64}, std::nothrow) == nullptr);
  std::set_new_handler(nullptr);
  if (handler_calls != 2) {
    fprintf(stderr, "nothrow new, throwing handler: the new-handler ran %d times\n", handler_calls);
  }
  EXPECT(handler_calls == 2);
  EXPECT(std::uncaught_exceptions() == 0);

  // Without a handler: std::bad_alloc, no handler call.
  handler_calls = 0;
  threw = false;
  try {
    ::operator delete (::operator new (huge, std::align_val_t{64}), std::align_val_t{64});
  } catch (const std::bad_alloc&) {
    threw = std::uncaught_exceptions() == 0;
  }
  EXPECT(threw && handler_calls == 0);
}

}  // namespace

extern "C" int compat_checks() {
  check_memalign_rounds_alignment_up();
  check_new_calls_the_new_handler();
  return failures ? 1 : 0;
}

#ifndef COMPAT_MODULE
int main() { return compat_checks(); }
#endif

// Every replaceable C++ operator new and delete: resolved to the shim, served by it (mode:auto),
// aligned as asked, and each delete form really gives the block back.
#include <cstdint>
#include <new>

#include "program_check.h"

namespace {

bool planning = false;
uint32_t next_seed = 1;

// The operators' mangled names on x86-64 (size_t is unsigned long: m).
const char* const kOperators[] = {
    "_Znwm",
    "_Znam",
    "_ZnwmRKSt9nothrow_t",
    "_ZnamRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_ZdlPv",
    "_ZdaPv",
    "_ZdlPvm",
    "_ZdaPvm",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t",
    "_ZdaPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t",
    "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

// Blocks over 32 KiB take a tag slot of their own (smaller ones share one, shared_slots.h), so a
// freed block's slot is the next block's (check_released).
constexpr size_t kSole = 40 << 10;

// Checks a block from one new form; `alignment` 0 means the default (16).
void exercise(const char* form, void* p, size_t size, size_t alignment) {
  if (!p) fprintf(stderr, "%s returned null\n", form);
  CHECK(p != nullptr);
  if (reinterpret_cast<uintptr_t>(p) % (alignment ? alignment : 16) != 0) {
    fprintf(stderr, "%s: %p is not aligned to %zu\n", form, p, alignment);
  }
  CHECK(reinterpret_cast<uintptr_t>(p) % (alignment ? alignment : 16) == 0);
  if (planning && !in_tag_slot(p)) fprintf(stderr, "%s was not served by the shim\n", form);
  CHECK(!planning || in_tag_slot(p));
  const uint32_t seed = next_seed++;
  fill_pattern(p, size, seed);
  CHECK(pattern_intact(p, size, seed));
}

// While profiling, a freed block of a size that came back (prime) keeps its tag slot for the next
// block of its size, so the next large request gets the same address back: proof that the delete
// form released the block. Checked with
// malloc, which every build routes to the shim.
// `freed` is the block's address as an integer: the pointer itself is dead after the delete.
void check_released(uintptr_t freed, size_t size = kSole) {
  if (!planning) return;
  void* again = malloc(size);
  if (reinterpret_cast<uintptr_t>(again) != freed) {
    fprintf(stderr, "block %#zx was not released (got %p)\n", static_cast<size_t>(freed), again);
  }
  CHECK(reinterpret_cast<uintptr_t>(again) == freed);
  free(again);
}

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Without pass marks a freed profiled block keeps its pages only once its size came back (a
// block of it asked for after one was freed: tag_region.h, kKeepIfReturning); before that its
// slot goes back to the free ones, and the next request of its size might be fitted into a
// kept slot of another size. So a size is made to come back before check_released relies on
// getting its kept slot back.
void prime(size_t size) {
  for (int i = 0; i < 2; ++i) free(malloc(size));
}

void check_plain_forms() {
  uintptr_t freed = 0;
  prime(kSole);
  void* p = ::operator new(kSole);
  exercise("new", p, kSole, 0);
  freed = address(p);
  ::operator delete(p);
  check_released(freed);

  p = ::operator new[](kSole);
  exercise("new[]", p, kSole, 0);
  freed = address(p);
  ::operator delete[](p);
  check_released(freed);

  p = ::operator new(kSole, std::nothrow);
  exercise("new nothrow", p, kSole, 0);
  freed = address(p);
  ::operator delete(p, std::nothrow);
  check_released(freed);

  p = ::operator new[](kSole, std::nothrow);
  exercise("new[] nothrow", p, kSole, 0);
  freed = address(p);
  ::operator delete[](p, std::nothrow);
  check_released(freed);

  p = ::operator new(kSole);
  exercise("new for sized delete", p, kSole, 0);
  freed = address(p);
  ::operator delete(p, kSole);
  check_released(freed);

  p = ::operator new[](kSole);
  exercise("new[] for sized delete[]", p, kSole, 0);
  freed = address(p);
  ::operator delete[](p, kSole);
  check_released(freed);
}

void check_aligned_forms() {
  uintptr_t freed = 0;
  for (size_t alignment = 16; alignment <= 65536; alignment *= 2) {
    // A different size in every round: the shim's pass detection (on in mode:auto) must not see
    // a repeating sequence here, or it would start serving these requests from a slab.
    const size_t size = kSole + alignment;
    const std::align_val_t al{alignment};
    prime(size);
    void* p = ::operator new(size, al);
    exercise("new aligned", p, size, alignment);
    freed = address(p);
    ::operator delete(p, al);
    check_released(freed, size);

    p = ::operator new[](size, al);
    exercise("new[] aligned", p, size, alignment);
    freed = address(p);
    ::operator delete[](p, al);
    check_released(freed, size);

    p = ::operator new(size, al, std::nothrow);
    exercise("new aligned nothrow", p, size, alignment);
    freed = address(p);
    ::operator delete(p, al, std::nothrow);
    check_released(freed, size);

    p = ::operator new[](size, al, std::nothrow);
    exercise("new[] aligned nothrow", p, size, alignment);
    freed = address(p);
    ::operator delete[](p, al, std::nothrow);
    check_released(freed, size);

    p = ::operator new(size, al);
    exercise("new aligned for sized delete", p, size, alignment);
    freed = address(p);
    ::operator delete(p, size, al);
    check_released(freed, size);

    p = ::operator new[](size, al);
    exercise("new[] aligned for sized delete[]", p, size, alignment);
    freed = address(p);
    ::operator delete[](p, size, al);
    check_released(freed, size);

    // Small aligned blocks go to the fallback allocator, aligned all the same.
    p = ::operator new(24, al);
    CHECK(reinterpret_cast<uintptr_t>(p) % alignment == 0);
    ::operator delete(p, al);
  }
}

void check_edges() {
  // Zero bytes: a unique, non-null pointer.
  void* a = ::operator new(0);
  void* b = ::operator new(0);
  CHECK(a && b && a != b);
  ::operator delete(a);
  ::operator delete(b);
  ::operator delete(nullptr);
  ::operator delete[](nullptr);

  volatile size_t huge = SIZE_MAX / 2;  // hidden from the compiler's size warnings
  CHECK(::operator new(huge, std::nothrow) == nullptr);
  CHECK(::operator new[](huge, std::align_val_t{64}, std::nothrow) == nullptr);
  bool threw = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    void* p = ::operator new[](huge, std::align_val_t{4096});
    ::operator delete[](p, std::align_val_t{4096});
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw);

  // New-expressions, the way programs use the operators.
  struct alignas(256) Aligned {
    char bytes[kSole];
  };
  Aligned* one = new Aligned;
  CHECK(reinterpret_cast<uintptr_t>(one) % 256 == 0);
  delete one;
  Aligned* many = new Aligned[3];
  CHECK(reinterpret_cast<uintptr_t>(many) % 256 == 0);
  delete[] many;
  char* text = new char[kSole];
  exercise("new-expression", text, kSole, 0);
  delete[] text;
}

}  // namespace

int main() {
  CHECK(shim_loaded());
  planning = shim_planning();
  for (const char* name : kOperators) {
    if (!resolves_to_shim(name)) fprintf(stderr, "%s is not the shim's\n", name);
    CHECK(resolves_to_shim(name));
  }
  check_plain_forms();
  check_aligned_forms();
  check_edges();
  return 0;
}

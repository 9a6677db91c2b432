// The program's C++ runtime for the exported operator new (host_cxx.h).
#include "host_cxx.h"

#include <dlfcn.h>

#include <atomic>

namespace memoplan::shim::host_cxx {

#ifdef MEMOPLAN_SHIM_STATIC_CXX
namespace {

// libstdc++.so.6 when the process has loaded it, in the global scope or not (a Python extension's
// dependency is loaded RTLD_LOCAL), else nullptr. Looked up on the failure paths only (an
// operator new that found no memory); kept once found: a library with unique symbols, as
// libstdc++ is, is never unloaded.
void* runtime() {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (!h) {
    h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (h) handle.store(h, std::memory_order_release);
  }
  return h;
}

template <class Function>
Function symbol(const char* name) {
  void* h = runtime();
  return h ? reinterpret_cast<Function>(dlsym(h, name)) : nullptr;
}

}  // namespace

std::new_handler new_handler() {
  // Without libstdc++.so no program code could have installed a handler the shim can see (a
  // program linked with a libstdc++ of its own keeps its handler there, as it did before).
  auto get = symbol<std::new_handler (*)()>("_ZSt15get_new_handlerv");  // std::get_new_handler
  return get ? get() : nullptr;
}

void throw_bad_alloc() {
  auto thrower = symbol<void (*)()>("_ZSt17__throw_bad_allocv");  // std::__throw_bad_alloc
  if (thrower) thrower();
  throw std::bad_alloc();
}

void* nothrow_new(size_t size, size_t alignment) {
  if (alignment <= __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
    auto plain = symbol<void* (*)(size_t, const std::nothrow_t&)>("_ZnwmRKSt9nothrow_t");
    return plain ? plain(size, std::nothrow) : nullptr;
  }
  auto aligned = symbol<void* (*)(size_t, std::align_val_t, const std::nothrow_t&)>(
      "_ZnwmSt11align_val_tRKSt9nothrow_t");
  return aligned ? aligned(size, std::align_val_t{alignment}, std::nothrow) : nullptr;
}

#else  // one runtime: the shim's is the program's

std::new_handler new_handler() { return std::get_new_handler(); }

void throw_bad_alloc() { throw std::bad_alloc(); }

void* nothrow_new(size_t size, size_t alignment) {
  try {  // the exported throwing forms, as libstdc++'s nothrow forms do
    return alignment <= __STDCPP_DEFAULT_NEW_ALIGNMENT__
               ? ::operator new(size)
               : ::operator new (size, std::align_val_t{alignment});
  } catch (...) {
    return nullptr;
  }
}

#endif

}  // namespace memoplan::shim::host_cxx

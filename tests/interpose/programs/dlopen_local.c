/* Loads a module RTLD_LOCAL, as Python loads an extension, and returns what its entry point
 * returns: `dlopen_local MODULE SYMBOL`, SYMBOL an `int (void)`. A C program, so the module's
 * libstdc++ is loaded only in the module's local scope. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODULE SYMBOL\n", argv[0]);
    return 2;
  }
  void* module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!module) {
    fprintf(stderr, "dlopen_local: %s\n", dlerror());
    return 2;
  }
  int (*entry)(void) = (int (*)(void))dlsym(module, argv[2]);
  if (!entry) {
    fprintf(stderr, "dlopen_local: %s\n", dlerror());
    return 2;
  }
  return entry();
}

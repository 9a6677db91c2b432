# Cross-compiling for 64-bit ARM Linux with Debian's cross toolchain (g++-aarch64-linux-gnu); the
# tests run under qemu-user (qemu-aarch64, libraries from /usr/aarch64-linux-gnu).
# scripts/cross_aarch64.sh uses it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(MEMOPLAN_QEMU_AARCH64 qemu-aarch64)
if(MEMOPLAN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MEMOPLAN_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()

# Cross-compiling for 64-bit ARM Linux with Debian's cross toolchain (g++-aarch64-linux-gnu); the
# tests run under qemu-user (qemu-aarch64) on the arm64 libraries installed multiarch
# (libc6:arm64 and the rest in /usr/lib/aarch64-linux-gnu; not the cross toolchain's own libc in
# /usr/aarch64-linux-gnu, whose loader with the multiarch libc.so.6 hangs at the first thread).
# scripts/cross_aarch64.sh uses it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian multiarch: the target's libraries (libunwind-dev:arm64, zlib1g-dev:arm64, libfmt-dev:arm64)
# are in /usr/lib/aarch64-linux-gnu; headers and header-only packages are shared.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
find_program(MEMOPLAN_QEMU_AARCH64 qemu-aarch64)
if(MEMOPLAN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MEMOPLAN_QEMU_AARCH64})
endif()

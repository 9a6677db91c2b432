#!/bin/bash
# The aarch64 cross build: the planner, trace/plan IO, the runtime, the LD_PRELOAD shim, the CLI
# and the GEMM kernels compiled with Debian's aarch64 cross g++ (tests/cross/CMakeLists.txt), their
# unit tests run under qemu-user. Installs g++-aarch64-linux-gnu, qemu-user and the arm64 libraries
# (dpkg --add-architecture arm64) when missing; exit 77 when they cannot be installed (no package
# mirror), as the Debian 13 stage does.
#   scripts/cross_aarch64.sh [BUILD_DIR]     (default build-aarch64/)
#   scripts/cross_aarch64.sh --install-only  installs what is missing, builds nothing
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=0
if [ "${1:-}" = --install-only ]; then
  install_only=1
  shift
fi
build=${1:-build-aarch64}
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
apt_install() {
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" > /dev/null
}
# The toolchain and the emulator, then the target's libraries (multiarch arm64 packages: the shim
# links libunwind, trace IO links fmt and zlib).
arm64_libs=(libunwind-dev:arm64 zlib1g-dev:arm64 libfmt-dev:arm64)
if ! command -v aarch64-linux-gnu-g++ > /dev/null || ! command -v qemu-aarch64 > /dev/null ||
    ! dpkg -s "${arm64_libs[@]}" > /dev/null 2>&1; then
  if ! { apt_install g++-aarch64-linux-gnu qemu-user file &&
         { dpkg --print-foreign-architectures | grep -x arm64 > /dev/null ||
           { $sudo dpkg --add-architecture arm64 && $sudo apt-get update -q > /dev/null; }; } &&
         apt_install "${arm64_libs[@]}"; }; then
    echo "cross_aarch64: could not install the aarch64 toolchain, qemu-user and arm64 libraries:" \
         "skipped" >&2
    exit 77
  fi
fi
[ "$install_only" = 0 ] || exit 0
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The shim with mimalloc 2 compiled in, as scripts/build.sh builds it, where its source is there.
mimalloc_source=$(scripts/mimalloc_source.sh --cached 2>/dev/null || true)
cmake -S tests/cross -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  "${launcher[@]}" -DMEMOPLAN_MIMALLOC_SOURCE="$mimalloc_source" > /dev/null
cmake --build "$build" -j "$(nproc)"
file "$build/planner_tests" | grep "ARM aarch64" > /dev/null ||
  { echo "cross_aarch64: $build/planner_tests is not an aarch64 program" >&2; exit 1; }
# qemu-user takes madvise(MADV_HUGEPAGE) as a hint it drops: the arena's huge-page flag check
# (arena_test.cc, read back from /proc/self/smaps) cannot hold under emulation.
ctest --test-dir "$build" -j "$(nproc)" --timeout 300 --output-on-failure -E '^ArenaHugePages[.]'

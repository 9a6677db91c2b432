#!/bin/bash
# The aarch64 cross build (issue: a portable build): the planner, the runtime and the GEMM kernels
# compiled with Debian's aarch64 cross g++ (tests/cross/CMakeLists.txt) and their unit tests run
# under qemu-user. Installs g++-aarch64-linux-gnu and qemu-user when missing (apt-get); exit 77
# when they cannot be installed (no package mirror), as the Debian 13 stage does.
#   scripts/cross_aarch64.sh [BUILD_DIR]     (default build-aarch64/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-aarch64}
if ! command -v aarch64-linux-gnu-g++ > /dev/null || ! command -v qemu-aarch64 > /dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      g++-aarch64-linux-gnu qemu-user > /dev/null; then
    echo "cross_aarch64: could not install g++-aarch64-linux-gnu and qemu-user: skipped" >&2
    exit 77
  fi
fi
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S tests/cross -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  "${launcher[@]}" > /dev/null
cmake --build "$build" -j "$(nproc)"
file "$build/planner_tests" | grep -q "ARM aarch64" ||
  { echo "cross_aarch64: $build/planner_tests is not an aarch64 program" >&2; exit 1; }
# qemu-user takes madvise(MADV_HUGEPAGE) as a hint it drops: the arena's huge-page flag check
# (arena_test.cc, read back from /proc/self/smaps) cannot hold under emulation.
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -E '^ArenaHugePages[.]'

#!/usr/bin/env bash
# Configures and builds memoplan. Usage: scripts/build.sh [PRESET] (default, asan or tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
# ccache shared between clones (scripts/run_tests.sh says why).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# The default and debian13 builds compile mimalloc 2 into the shim (interpose/CMakeLists.txt says
# why) from Debian 12's source, fetched once by scripts/mimalloc_source.sh (scripts/install_deps.sh
# does it on Debian 12; scripts/debian13.sh mounts the host's tree in its root and names it in
# MEMOPLAN_MIMALLOC_SOURCE). Where it cannot be had, or MEMOPLAN_MIMALLOC_SOURCE=none, the shim
# loads libmimalloc.so.2 (Debian 13 ships mimalloc 3 only: there glibc).
extra=()
if [ "$preset" = default ] || [ "$preset" = debian13 ]; then
  src="${MEMOPLAN_MIMALLOC_SOURCE:-$(scripts/mimalloc_source.sh --cached 2>/dev/null || true)}"
  [ "$src" != none ] || src=""
  extra=(-DMEMOPLAN_MIMALLOC_SOURCE="$src")
fi
cmake --preset "$preset" "${extra[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"

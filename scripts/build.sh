#!/usr/bin/env bash
# Configures and builds memoplan. Usage: scripts/build.sh [PRESET] (default, asan or tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
# ccache shared between clones (scripts/run_tests.sh says why).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# The default build compiles mimalloc 2 into the shim (interpose/CMakeLists.txt says why) from
# Debian's source, fetched once by scripts/mimalloc_source.sh (scripts/install_deps.sh does it on
# Debian 12; Debian 13 ships mimalloc 3 only, and there, or where it cannot be fetched, the shim
# loads libmimalloc.so.2 as before). MEMOPLAN_MIMALLOC_SOURCE=none builds without it.
extra=()
if [ "$preset" = default ] && [ "${MEMOPLAN_MIMALLOC_SOURCE:-}" != none ]; then
  src="${MEMOPLAN_MIMALLOC_SOURCE:-$(scripts/mimalloc_source.sh --cached 2>/dev/null || true)}"
  extra=(-DMEMOPLAN_MIMALLOC_SOURCE="$src")
fi
cmake --preset "$preset" "${extra[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"

#!/usr/bin/env bash
# Configures and builds memoplan. Usage: scripts/build.sh [PRESET] (default, asan or tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"

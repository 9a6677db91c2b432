#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh default
ctest --preset default -j "$(nproc)"

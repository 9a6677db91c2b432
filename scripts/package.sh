#!/usr/bin/env bash
# Builds the Debian packages (cmake/memoplanPackaging.cmake) into build-debian13/packages: the
# CMake preset debian13 configured for /usr, built, then cpack. One script for every place that
# makes them, so that their steps stay the same: scripts/debian13.sh package (CI, in the Debian 13
# root) and docker/Dockerfile's build stage (debian:trixie). Run it on Debian 13 with the packages
# of scripts/install_deps.sh (under their Debian 13 names) installed: dpkg-shlibdeps takes the
# dependencies' names and versions from the system it runs on.
#
#   scripts/package.sh        MEMOPLAN_JOBS: parallel build jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=build-debian13/packages
# mimalloc 2 compiled into the shim where scripts/debian13.sh mounted its source (scripts/build.sh).
mimalloc="${MEMOPLAN_MIMALLOC_SOURCE:-none}"
[ "$mimalloc" != none ] || mimalloc=""
cmake --preset debian13 -DCMAKE_INSTALL_PREFIX=/usr -DMEMOPLAN_MIMALLOC_SOURCE="$mimalloc" >/dev/null
cmake --build --preset debian13 -j "${MEMOPLAN_JOBS:-$(nproc)}"
# Only this build's packages in the folder (the smoke test installs /debs/*.deb).
rm -rf "$packages"
cpack --config build-debian13/CPackConfig.cmake -B "$packages"
rm -rf "$packages/_CPack_Packages"
ls -l "$packages"/*.deb

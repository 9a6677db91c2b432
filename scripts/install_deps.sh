#!/usr/bin/env bash
# Installs the Debian packages memoplan builds, tests, packages and benchmarks with, on Debian 12
# or 13. Idempotent: skips apt-get entirely when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  file  # CPack's Debian packages: dpkg-shlibdeps (cmake/memoplanPackaging.cmake)
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  coinor-libcbc-dev
  libunwind-dev libjemalloc-dev libgoogle-perftools-dev libmimalloc-dev
  libtorch-dev libtorch-test python3-torch python3-torchvision libopenblas0-pthread
  libdnnl-dev  # oneDNN's headers: the tuned kernels' blocked layout (LibTorch links oneDNN itself)
  libboost-dev libsimdjson-dev gnuplot-nox wrk curl
  nghttp2-client  # h2load: bench/run_serve_load.py's gRPC load
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # memoplan-serve --grpc-port
  python3-grpcio python3-protobuf  # its test's gRPC client
  clang libclang-rt-14-dev  # the fuzz targets: libFuzzer (scripts/run_fuzz.sh)
)
# The names above are Debian 12's (bookworm). Debian 13 (trixie; checked with apt-cache policy in
# scripts/debian13.sh's root, and what docker/Dockerfile's debian:trixie build stage installs):
#   libclang-rt-14-dev -> libclang-rt-dev   (LLVM 14 is gone; libclang-rt-dev follows the default
#                                            clang, 19 in trixie, as the clang package does)
#   (new)              -> python3-setuptools python3-dev (torch.compile, PyTorch 2.x only)
# Every other name is the same in both.
# suite_packages SUITE: the names for that Debian suite.
suite_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    if [ "$1" = trixie ] && [ "$p" = libclang-rt-14-dev ]; then p=libclang-rt-dev; fi
    echo "$p"
  done
  if [ "$1" = trixie ]; then echo python3-setuptools python3-dev | tr ' ' '\n'; fi
}
# The suite of the system this runs on (bookworm where /etc/os-release does not say).
host_suite() {
  # shellcheck disable=SC1091  # the system's file
  (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-bookworm}") || echo bookworm
}

# --list [SUITE]: the names only, for SUITE (default: this system's; scripts/debian13.sh asks for
# trixie's from a Debian 12 host).
if [ "${1:-}" = --list ]; then
  suite_packages "${2:-$(host_suite)}"
  exit 0
fi
mapfile -t PACKAGES < <(suite_packages "$(host_suite)")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "memoplan: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# mimalloc 2's source, which scripts/build.sh compiles into the shim (Debian 12 only: Debian 13
# ships mimalloc 3). Where it cannot be fetched the build goes on and the shim loads
# libmimalloc.so.2.
if [ "$(host_suite)" = bookworm ]; then
  "$(dirname "$0")"/mimalloc_source.sh >/dev/null 2>&1 ||
    echo "memoplan: mimalloc's source not fetched (scripts/mimalloc_source.sh); the shim will load libmimalloc.so.2" >&2
fi

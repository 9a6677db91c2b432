#!/usr/bin/env bash
# Installs the Debian packages memoplan builds, tests and benchmarks with. Idempotent: skips
# apt-get entirely when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  coinor-libcbc-dev
  libunwind-dev libjemalloc-dev libgoogle-perftools-dev libmimalloc-dev
  libtorch-dev libtorch-test python3-torch python3-torchvision libopenblas0-pthread
  libdnnl-dev  # oneDNN's headers: the tuned kernels' blocked layout (LibTorch links oneDNN itself)
  libcpp-httplib-dev libsimdjson-dev gnuplot-nox wrk curl
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # memoplan-serve --grpc-port
  python3-grpcio python3-protobuf  # its test's gRPC client
  clang libclang-rt-14-dev  # the fuzz targets: libFuzzer (scripts/run_fuzz.sh)
)
# --list: the names only (scripts/debian13.sh maps them to Debian 13's).
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "memoplan: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

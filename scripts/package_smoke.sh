#!/usr/bin/env bash
# The Debian packages' smoke test, run as root inside a clean Debian root (debootstrap minbase and
# nothing else) by scripts/debian13.sh package-test:
#
#   package_smoke.sh DEBS SRC MODELS   DEBS: the .debs; SRC: this clone (read-only is enough);
#                                      MODELS: tiny.pt and resnet18.pt, relative to SRC
#
# apt installs the runtime packages and resolves their Depends from the mirror (that is what
# checks them); then every installed program and library loads (ldd), memoplan plans and
# validates a trace, the shim prints its statistics, `memoplan run` runs a model, memoplan-serve
# run by an unprivileged user answers its readiness probe (as docker/Dockerfile's HEALTHCHECK asks
# it) and stops on SIGTERM with status 0; then libmemoplan-dev
# with a compiler: tests/install/consumer builds against /usr with find_package and with
# pkg-config; last, every package is purged and none of its files may be left.
set -euo pipefail
debs=$1 src=$2
models=$src/$3
trace=$src/tests/data/traces/resnet18.json.gz
runtime_packages=(libmemoplan-preload libmemoplan-torch0 libmemoplan-tuned0 memoplan-tools
                  memoplan-serve)
all_packages=(libmemoplan-dev "${runtime_packages[@]}")
export DEBIAN_FRONTEND=noninteractive

step() { echo "== package-test (${SECONDS}s): $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "apt-get install the runtime packages (Depends from the mirror)"
apt-get update -qq
runtime_debs=()
for package in "${runtime_packages[@]}"; do
  runtime_debs+=("$debs/${package}"_*.deb)
done
# curl: for memoplan-serve's readiness probe below (the image installs it for its health check).
apt-get install -y -qq --no-install-recommends "${runtime_debs[@]}" curl >/dev/null
dpkg-query -W "${runtime_packages[@]}"

step "ldd: every installed program and library finds its libraries"
mapfile -t binaries < <(dpkg -L "${runtime_packages[@]}" | grep -E '^/usr/bin/|\.so(\.[0-9.]+)?$')
for f in "${binaries[@]}"; do
  [ -f "$f" ] || continue
  # Not `! ldd | grep`: set -e ignores a negated pipeline.
  if ldd "$f" | grep 'not found'; then
    fail "$f: a library is not found"
  fi
done
echo "${#binaries[@]} files checked"

step "memoplan --version, plan, validate"
memoplan --version
memoplan plan "$trace" -o /tmp/plan.json
memoplan validate "$trace" /tmp/plan.json

step "the shim, preloaded, prints its statistics (MEMOPLAN_CONF=stats_print:true)"
preload=$(dpkg -L libmemoplan-preload | grep 'libmemoplan_preload\.so$')
MEMOPLAN_CONF=stats_print:true LD_PRELOAD=$preload memoplan info "$trace" > /tmp/shim.txt 2>&1
grep '^memoplan: passes ' /tmp/shim.txt >/dev/null ||
  { cat /tmp/shim.txt >&2; fail "no shim statistics under LD_PRELOAD=$preload"; }
grep -m 3 '^memoplan: ' /tmp/shim.txt

step "memoplan run (memoplan-run, libmemoplan_torch.so.0, LibTorch from the packages)"
memoplan run "$models/tiny.pt" --input 3x7 --dtype int64 --iters 2 --no-rss --json -q > /tmp/run.json
grep '"passes_compared": *2' /tmp/run.json >/dev/null || { cat /tmp/run.json >&2; fail "memoplan run"; }
head -c 400 /tmp/run.json
echo

step "memoplan run --kernels tuned (plan() loads libmemoplan_tuned.so.0 from beside libmemoplan_torch.so.0)"
memoplan run "$models/resnet18.pt" --kernels tuned --iters 2 --no-rss --json -q > /tmp/tuned.json
grep '"kernels": *"tuned"' /tmp/tuned.json >/dev/null || { cat /tmp/tuned.json >&2; fail "memoplan run --kernels tuned"; }

step "memoplan-serve: --help, then resnet18, as a user without privileges (as in the image), until /v2/health/ready answers"
memoplan-serve --help >/dev/null
setpriv --reuid=nobody --regid=nogroup --clear-groups \
  memoplan-serve "$models/resnet18.pt" --name resnet18 --host 127.0.0.1 --port 18000 --workers 1 \
  > /tmp/serve.log 2>&1 &
serve_pid=$!
ready=0
for _ in $(seq 1 120); do
  if curl -fsS http://127.0.0.1:18000/v2/health/ready >/dev/null 2>&1; then
    ready=1
    break
  fi
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.5
done
[ "$ready" = 1 ] || { cat /tmp/serve.log >&2; kill "$serve_pid" 2>/dev/null || true; fail "memoplan-serve never got ready"; }
curl -fsS http://127.0.0.1:18000/v2/models/resnet18
echo
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "memoplan-serve exited $? on SIGTERM"

step "libmemoplan-dev: a consumer with find_package(memoplan) and with pkg-config"
apt-get install -y -qq --no-install-recommends "$debs"/libmemoplan-dev_*.deb g++ cmake ninja-build pkgconf \
  >/dev/null
cmake -S "$src/tests/install/consumer" -B /tmp/consumer -G Ninja -DCMAKE_BUILD_TYPE=Release \
  > /tmp/consumer-cmake.log || { cat /tmp/consumer-cmake.log >&2; fail "cmake of the consumer"; }
cmake --build /tmp/consumer > /tmp/consumer-build.log ||
  { cat /tmp/consumer-build.log >&2; fail "build of the consumer"; }
/tmp/consumer/consumer
grep -x "$preload" /tmp/consumer/preload_path.txt >/dev/null ||
  fail "memoplan::preload is $(cat /tmp/consumer/preload_path.txt), not $preload"
LD_PRELOAD=$preload /tmp/consumer/consumer > /tmp/consumer-preloaded.txt 2>&1
grep 'shim stats {' /tmp/consumer-preloaded.txt >/dev/null || fail "no shim statistics in the consumer"
pkg-config --validate memoplan
pkg-config --modversion memoplan
# shellcheck disable=SC2046  # the flags are words
g++ -std=c++17 -O1 "$src/tests/install/consumer/main.cc" $(pkg-config --cflags --libs memoplan) \
  -o /tmp/consumer_pc
/tmp/consumer_pc

step "purge: no file of the packages is left"
mapfile -t files < <(dpkg -L "${all_packages[@]}" | while read -r f; do
                       if [ -L "$f" ] || [ -f "$f" ]; then echo "$f"; fi
                     done)
apt-get purge -y -qq "${all_packages[@]}" >/dev/null
for f in "${files[@]}"; do
  if [ -e "$f" ] || [ -L "$f" ]; then
    fail "$f is left after the purge"
  fi
done
for dir in /usr/include/memoplan /usr/lib/*/cmake/memoplan; do
  [ ! -e "$dir" ] || fail "$dir is left after the purge"
done
echo "${#files[@]} files installed, none left"
step "ok"

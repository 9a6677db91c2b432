#!/usr/bin/env bash
# memoplan on Debian 13 (trixie) with LibTorch 2.6, from Debian packages only, in a debootstrap
# root beside the host.
#
#   scripts/debian13.sh root              makes the root (debootstrap trixie) and installs in it the
#                                         packages of scripts/install_deps.sh under their Debian 13
#                                         names, plus libtorch-test; a second run takes seconds
#   scripts/debian13.sh roots             root, then package-test's clean root (scripts/run_tests.sh
#                                         makes both while the Debian 12 build compiles)
#   scripts/debian13.sh build             root, then builds this clone in it (CMake preset
#                                         debian13: build-debian13/, ccache kept in the root)
#   scripts/debian13.sh test              build, then runs every test with CTest in the root
#   scripts/debian13.sh main              root, then the README's main job (scripts/run_main.sh) in
#                                         it: build, plan resnet18, run it under the shim, memoplan run
#   scripts/debian13.sh package           root, then the Debian packages (scripts/package.sh:
#                                         preset debian13 for /usr, cpack) in
#                                         build-debian13/packages
#   scripts/debian13.sh package-test      package, then installs the .debs with apt on a clean
#                                         root and smoke-tests them (scripts/package_smoke.sh):
#                                         ldd, memoplan plan/validate/run, the shim, memoplan-serve,
#                                         a consumer of libmemoplan-dev, purge
#   scripts/debian13.sh shell [-- CMD...] runs CMD (default: bash) in the root, this clone
#                                         bind-mounted at /src and the working directory;
#                                         e.g. scripts/debian13.sh shell -- g++ --version
#
# The clean root of package-test is a second debootstrap (minbase, nothing else) beside the first,
# ${ROOT}-clean, with a stamp of its own; it is never changed: each run installs into an overlay
# over it (a copy where overlayfs is not available) that goes at the end. The packages apt
# downloads are kept in debian13-apt-archives beside the roots, so the second run downloads
# nothing.
#
# The root lives outside the clone so that a second run, other clones and CI reuse it:
# ${MEMOPLAN_CACHE:-$HOME/.cache/memoplan}/debian13-root (MEMOPLAN_DEBIAN13_ROOT overrides it).
# The mirror is the host's Debian mirror, from its apt sources (MEMOPLAN_DEBIAN_MIRROR overrides
# it). A root whose debootstrap finished carries a stamp file; one without it (an interrupted
# debootstrap) is removed and made again. Needs root (re-runs itself with sudo otherwise): the
# mounts (/proc, /sys, /dev, /src) are made in a mount namespace of their own, so that they are
# never seen outside this process, and are unmounted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

SUITE=trixie
ROOT="${MEMOPLAN_DEBIAN13_ROOT:-${MEMOPLAN_CACHE:-$HOME/.cache/memoplan}/debian13-root}"
ROOT="${ROOT%/}"
case "$ROOT" in
  /?*) ;;
  *) echo "memoplan: the Debian 13 root must be an absolute path other than /: '$ROOT'" >&2; exit 2 ;;
esac
STAMP_NAME=.memoplan-debootstrap-complete
STAMP="$ROOT/$STAMP_NAME"
# package-test's clean root (never changed: each run works in an overlay over it) and the apt
# caches its runs share.
CLEAN_ROOT="$ROOT-clean"
APT_ARCHIVES="$(dirname "$ROOT")/debian13-apt-archives"
APT_LISTS="$(dirname "$ROOT")/debian13-apt-lists"

# The packages of scripts/install_deps.sh under their Debian 13 names (the 12 -> 13 renames are
# listed there; docker/Dockerfile's trixie build stage installs the same).
mapfile -t PACKAGES < <("$repo/scripts/install_deps.sh" --list trixie)

usage() {
  echo "usage:" >&2
  sed -n '5,24p' "$0" | sed 's/^#//' >&2
  exit 2
}
case "${1:-}" in
  root | roots | build | test | main | package | package-test | shell) ;;
  *) usage ;;
esac

# Root privileges: debootstrap, chroot and mount need them. The root's path is fixed before sudo
# (sudo may change HOME). Then a private mount namespace: what is mounted below is this process's
# alone and goes with it, even when it is killed.
if [ "$(id -u)" -ne 0 ]; then
  exec sudo MEMOPLAN_DEBIAN13_ROOT="$ROOT" ${MEMOPLAN_DEBIAN_MIRROR:+MEMOPLAN_DEBIAN_MIRROR="$MEMOPLAN_DEBIAN_MIRROR"} \
    "$repo/scripts/debian13.sh" "$@"
fi
if [ -z "${MEMOPLAN_DEBIAN13_NS:-}" ] && command -v unshare >/dev/null; then
  export MEMOPLAN_DEBIAN13_NS=1
  exec unshare --mount --propagation private "$repo/scripts/debian13.sh" "$@"
fi

# The host's Debian mirror: the first deb822 URIs (or one-line `deb`) entry that is not a security
# or updates archive; deb.debian.org when none is found.
host_mirror() {
  local m=""
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    m="$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' \
      /etc/apt/sources.list.d/*.sources | grep -v -e '-security' -e '-updates' | head -n 1 || true)"
  fi
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m="$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }' \
      /etc/apt/sources.list | grep -v -e '-security' | head -n 1 || true)"
  fi
  echo "${m:-http://deb.debian.org/debian}"
}
MIRROR="${MEMOPLAN_DEBIAN_MIRROR:-$(host_mirror)}"
MIRROR="${MIRROR%/}"
# The security archive beside the mirror (deb.debian.org serves both), else security.debian.org.
SECURITY="${MIRROR%/debian}/debian-security"
[ "$SECURITY" != "$MIRROR/debian-security" ] || SECURITY=http://security.debian.org/debian-security

# Mounts made by this process, unmounted in reverse order on exit; then package-test's work
# folder (its overlay), removed once nothing is mounted below it: a bind mount left there (the
# clone, the packages) would otherwise be emptied with it.
MOUNTED=()
WORK=""
cleanup() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" 2>/dev/null || true
  done
  MOUNTED=()
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    if awk -v r="$WORK" 'index($2, r "/") == 1 { found = 1 } END { exit !found }' /proc/mounts; then
      echo "memoplan: $WORK still has mounts below it; left in place" >&2
    else
      rm -rf --one-file-system "$WORK"
    fi
    WORK=""
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# mount_at TARGET MOUNT-ARGS...: mounts under the root unless something is mounted there already.
mount_at() {
  local target="$ROOT$1"
  shift
  mountpoint -q "$target" && return 0
  mkdir -p "$target"
  mount "$@" "$target"
  MOUNTED+=("$target")
}

mount_system() {
  mount_at /proc -t proc proc
  mount_at /sys -t sysfs sysfs
  mount_at /dev --bind /dev
  mount_at /dev/pts --bind /dev/pts
  # Name resolution for apt inside the root.
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
}

# in_root CMD...: runs CMD in the root with a clean environment.
in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    "$@"
}

# check_nothing_mounted [DIR]: fails when anything is mounted at or below DIR (default: the root;
# an earlier run's leftovers): DIR is then not removed, whatever its state.
check_nothing_mounted() {
  local dir="${1:-$ROOT}"
  if awk -v r="$dir" '$2 == r || index($2, r "/") == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    echo "memoplan: something is mounted under $dir; unmount it first:" >&2
    awk -v r="$dir" '$2 == r || index($2, r "/") == 1 { print "  " $2 }' /proc/mounts >&2
    exit 1
  fi
}

# mirror_answers: whether the mirror serves the suite (the same check as before debootstrap).
mirror_answers() {
  curl -fsI --max-time 30 "$MIRROR/dists/$SUITE/Release" >/dev/null 2>&1 ||
    wget -q --spider --timeout=30 "$MIRROR/dists/$SUITE/Release" >/dev/null 2>&1
}

# Step 1: the Debian 13 root, made with debootstrap, or reused when its stamp says it is complete.
# make_root [DIR]: DIR (default: the root); package-test's clean root gets its apt sources before
# its stamp, and nothing after.
make_root() {
  local root="${1:-$ROOT}"
  local stamp="$root/$STAMP_NAME"
  if [ -f "$stamp" ]; then
    return 0
  fi
  if ! command -v debootstrap >/dev/null; then
    echo "memoplan: installing debootstrap on the host"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  fi
  # No root yet and no mirror to make it from: exit 77, which scripts/run_tests.sh reports as a
  # skipped stage rather than a failure.
  if ! mirror_answers; then
    echo "memoplan: cannot reach $MIRROR to make the Debian 13 root: skipped" >&2
    exit 77
  fi
  if [ -e "$root" ]; then
    # No stamp: an interrupted debootstrap; it cannot be resumed reliably, so it is redone.
    check_nothing_mounted "$root"
    echo "memoplan: $root is incomplete (no stamp); removing it"
    rm -rf --one-file-system "$root"
  fi
  echo "memoplan: debootstrap $SUITE $root $MIRROR"
  mkdir -p "$(dirname "$root")"
  # minbase: apt and the essential packages; build-essential and the rest come in step 2.
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR"
  [ "$root" = "$ROOT" ] || write_sources "$root"
  printf '%s %s %s\n' "$SUITE" "$MIRROR" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$stamp"
}

# write_sources [DIR]: the root's (or DIR's) apt sources: trixie (main) on the mirror, and
# trixie-security when it answers. Written only when they change, so that a second run does not
# touch apt.
write_sources() {
  local root="${1:-$ROOT}"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg sources
  sources="Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: $keyring
"
  if curl -fsI --max-time 15 "$SECURITY/dists/$SUITE-security/Release" >/dev/null 2>&1 ||
     wget -q --spider --timeout=15 "$SECURITY/dists/$SUITE-security/Release" >/dev/null 2>&1; then
    sources+="
Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: $keyring
"
  else
    echo "memoplan: $SECURITY does not answer; the root has no $SUITE-security source" >&2
  fi
  local file="$root/etc/apt/sources.list.d/debian.sources"
  if [ "$(cat "$file" 2>/dev/null)" != "${sources%$'\n'}" ] || [ -s "$root/etc/apt/sources.list" ]; then
    printf '%s' "$sources" > "$file"
    # debootstrap's one-line list names the same archive; the deb822 file replaces it.
    rm -f "$root/etc/apt/sources.list"
  fi
}

# Step 2: the build and test dependencies, installed in the root unless they all are already
# (one dpkg-query, no apt: a second run takes seconds).
install_packages() {
  local installed missing unknown
  # shellcheck disable=SC2016  # dpkg-query's format, not the shell's
  installed="$(chroot "$ROOT" dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' \
               "${PACKAGES[@]}" 2>/dev/null | awk '$1 == "ii" { sub(/:.*/, "", $2); print $2 }' || true)"
  mapfile -t missing < <(printf '%s\n' "${PACKAGES[@]}" | sort -u | comm -23 - <(sort -u <<<"$installed"))
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  mount_system
  # No services start inside the root.
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$ROOT/usr/sbin/policy-rc.d"
  in_root apt-get update -qq
  # Every name must exist in trixie: a renamed package fails here, by name, not inside apt-get.
  # (apt-cache policy prints nothing for an unknown name and "Candidate: (none)" for one that
  # has no installable version.)
  mapfile -t unknown < <(in_root apt-cache policy "${missing[@]}" |
    awk '/^[^ ]/ { pkg = $1; sub(/:$/, "", pkg) } /^  Candidate: [^(]/ { print pkg }' |
    sort -u | comm -13 - <(printf '%s\n' "${missing[@]}" | sort -u))
  if [ ${#unknown[@]} -gt 0 ]; then
    echo "memoplan: no such package in Debian 13 ($SUITE): ${unknown[*]}" >&2
    exit 1
  fi
  echo "memoplan: installing in the Debian 13 root: ${missing[*]}"
  in_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
  in_root apt-get clean
}

# The mimalloc 2 source the host fetched (scripts/mimalloc_source.sh, run by install_deps.sh on
# Debian 12), compiled into the shim here too, as on Debian 12: Debian 13 ships mimalloc 3 only,
# so without it the shim's fallback is glibc (2.2x mimalloc's time on the python3 program of
# bench/run_shim_programs.py). Mounted read-only at /mimalloc; none: built without, as before.
MIMALLOC_TREE="$("$repo/scripts/mimalloc_source.sh" --cached 2>/dev/null || true)"

# in_src CMD...: runs CMD in the root with this clone at /src, its working directory; the
# environment is clean but for what the tests and builds read (MEMOPLAN_*). Returns CMD's status.
in_src() {
  mount_system
  mount_at /src --bind "$repo"
  local mimalloc=""
  if [ -n "$MIMALLOC_TREE" ]; then
    mount_at /mimalloc -o bind,ro "$MIMALLOC_TREE"
    mimalloc=/mimalloc
  fi
  local status=0
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    MEMOPLAN_REQUIRE_PLANS="${MEMOPLAN_REQUIRE_PLANS:-}" MEMOPLAN_PRESET="${MEMOPLAN_PRESET:-}" \
    MEMOPLAN_NO_INSTALL="${MEMOPLAN_NO_INSTALL:-}" MEMOPLAN_MODELS="${MEMOPLAN_MODELS:-}" \
    MEMOPLAN_MIMALLOC_SOURCE="${mimalloc:-none}" \
    /bin/sh -c 'cd /src && exec "$@"' sh "$@" || status=$?
  return "$status"
}

# Steps 1 and 2: the root, its apt sources and its packages, each skipped when already done.
prepare_root() {
  make_root
  write_sources
  install_packages
}

# Step 3 (package, package-test): the Debian packages, built in the root by scripts/package.sh
# (what docker/Dockerfile's build stage runs too).
make_packages() {
  in_src scripts/package.sh
}

# package-test: the .debs installed with apt on a fresh overlay over the clean root, then
# scripts/package_smoke.sh in it. The models it runs come from the build root (Python and
# LibTorch are there, not in the clean root): build-debian13/smoke/.
test_packages() {
  # The tiny TorchScript model of the `memoplan run` tests, and resnet18 for memoplan-serve.
  # shellcheck disable=SC2016  # expands in the root
  in_src sh -c 'mkdir -p build-debian13/smoke &&
    { [ -f build-debian13/smoke/tiny.pt ] ||
      /usr/bin/python3 tests/apps/run/make_tiny_model.py build-debian13/smoke/tiny.pt; } &&
    { [ -f build-debian13/smoke/resnet18.pt ] ||
      /usr/bin/python3 bench/models/make_zoo.py --only resnet18 --out build-debian13/smoke >/dev/null; }'
  # The build root's mounts go; from here on ROOT is the throwaway root.
  cleanup
  mkdir -p "$APT_ARCHIVES/partial" "$APT_LISTS/partial"
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/memoplan-package-test.XXXXXX")"
  mkdir -p "$WORK/upper" "$WORK/work" "$WORK/root"
  if mount -t overlay overlay \
       -o "lowerdir=$CLEAN_ROOT,upperdir=$WORK/upper,workdir=$WORK/work" "$WORK/root" 2>/dev/null; then
    MOUNTED+=("$WORK/root")
    echo "memoplan: clean root: overlay over $CLEAN_ROOT"
  else
    echo "memoplan: clean root: no overlayfs here; copying $CLEAN_ROOT"
    cp -a "$CLEAN_ROOT/." "$WORK/root/"
  fi
  ROOT="$WORK/root"
  mount_system
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$ROOT/usr/sbin/policy-rc.d"
  mount_at /var/cache/apt/archives --bind "$APT_ARCHIVES"
  mount_at /var/lib/apt/lists --bind "$APT_LISTS"
  mount_at /debs -o bind,ro "$repo/build-debian13/packages"
  mount_at /src -o bind,ro "$repo"
  in_root bash /src/scripts/package_smoke.sh /debs /src build-debian13/smoke
}

require_root() {
  if [ ! -f "$STAMP" ]; then
    echo "memoplan: no Debian 13 root at $ROOT; run scripts/debian13.sh root first" >&2
    exit 1
  fi
}

cmd="${1:-}"
[ $# -eq 0 ] || shift
case "$cmd" in
  root)
    [ $# -eq 0 ] || usage
    prepare_root
    echo "memoplan: Debian 13 root ready: $ROOT"
    ;;
  roots)
    [ $# -eq 0 ] || usage
    prepare_root
    make_root "$CLEAN_ROOT"
    echo "memoplan: Debian 13 roots ready: $ROOT, $CLEAN_ROOT"
    ;;
  build | test)
    [ $# -eq 0 ] || usage
    prepare_root
    # Not exec: the trap unmounts once the command is done; its status is this script's.
    status=0
    in_src scripts/build.sh debian13 || status=$?
    if [ "$cmd" = test ] && [ "$status" -eq 0 ]; then
      # As scripts/run_tests.sh: the shim's engine tests fail, rather than skip, where the engine
      # cannot reserve its address space.
      # shellcheck disable=SC2016
      # A failure runs the failed tests once more, their output last (CI shows a log's tail); the
      # stage fails whatever that run gives.
      MEMOPLAN_REQUIRE_PLANS=1 in_src sh -c 'ctest --preset debian13 -j "$(nproc)" || {
        s=$?; echo "memoplan: the failed tests once more, for their output:"
        ctest --preset debian13 --rerun-failed --output-on-failure; exit "$s"; }' || status=$?
    fi
    exit "$status"
    ;;
  main)
    [ $# -eq 0 ] || usage
    prepare_root
    status=0
    MEMOPLAN_PRESET=debian13 MEMOPLAN_NO_INSTALL=1 MEMOPLAN_MODELS=models-debian13 \
      in_src scripts/run_main.sh || status=$?
    exit "$status"
    ;;
  package)
    [ $# -eq 0 ] || usage
    prepare_root
    status=0
    make_packages || status=$?
    exit "$status"
    ;;
  package-test)
    [ $# -eq 0 ] || usage
    prepare_root
    # apt installs the packages' dependencies from the mirror: without it, skipped (77).
    if ! mirror_answers; then
      echo "memoplan: cannot reach $MIRROR to install the packages' dependencies: skipped" >&2
      exit 77
    fi
    make_root "$CLEAN_ROOT"
    # Not in a condition: under set -e each step's failure ends the script with its status (the
    # trap unmounts and removes the overlay).
    make_packages
    echo "memoplan: packages made (${SECONDS}s)"
    test_packages
    echo "memoplan: package-test: ok (${SECONDS}s)"
    ;;
  shell)
    [ "${1:-}" != "--" ] || shift
    require_root
    [ $# -gt 0 ] || set -- bash
    status=0
    in_src "$@" || status=$?
    exit "$status"
    ;;
  *)
    usage
    ;;
esac

#!/usr/bin/env bash
# mimalloc_source.sh [--cached] [DIR]: Debian 12's mimalloc 2 source (2.0.9, what its
# libmimalloc-dev ships; Debian 13 has mimalloc 3 only), unpacked under DIR (default
# ~/.cache/memoplan/mimalloc); prints its tree's path. For the shim's embedded fallback
# (interpose/CMakeLists.txt, MEMOPLAN_MIMALLOC_SOURCE). apt-get source through a sources list of
# its own (bookworm's deb-src): the system's apt configuration is left as it is. Idempotent.
# --cached: only a tree already there (exit 1 where there is none).
set -euo pipefail
cached=0
if [ "${1:-}" = --cached ]; then cached=1; shift; fi
dir="${1:-$HOME/.cache/memoplan/mimalloc}"
# tree: the unpacked source tree's path, if there is one.
tree() {
  local static
  static=$(find "$dir" -maxdepth 3 -path '*/src/static.c' 2>/dev/null | head -n 1 || true)
  [[ -n "$static" ]] && dirname "$(dirname "$static")"
}
tree && exit 0
[ "$cached" = 0 ] || exit 1
mkdir -p "$dir/lists/partial" "$dir/download"
echo "deb-src http://deb.debian.org/debian bookworm main" > "$dir/sources.list"
apt_opts=(-q -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$dir/lists")
apt-get "${apt_opts[@]}" update >&2
(cd "$dir/download" && apt-get "${apt_opts[@]}" source --download-only mimalloc >&2)
tarball=$(find "$dir/download" -name 'mimalloc_2*.orig.tar.*' | sort -V | tail -n 1)
[[ -n "$tarball" ]] || { echo "mimalloc_source: no mimalloc 2 source in bookworm" >&2; exit 1; }
tar -C "$dir" -xf "$tarball"
tree

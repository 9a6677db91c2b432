#!/bin/bash
# install.consumer: installs memoplan from the build tree (cmake --install, components dev,
# preload, tools, torch and tuned), moves the tree elsewhere (nothing may point back at the build or at
# the first prefix), then builds and runs a consumer against it twice: with find_package(memoplan)
# and with pkg-config; runs the installed programs and the shim from the moved tree.
#   install_test.sh CMAKE BUILD_DIR CONSUMER_SOURCE WORK_DIR CXX GENERATOR TORCH(ON|OFF) SOURCE_DIR
set -euo pipefail
cmake=$1 build=$2 consumer=$3 work=$4 cxx=$5 generator=$6 torch=$7 source=$8

rm -rf "$work"
mkdir -p "$work"
components="dev preload tools"
[ "$torch" = ON ] && components="$components torch tuned"
for component in $components; do
  "$cmake" --install "$build" --prefix "$work/first" --component "$component" > /dev/null
done
mv "$work/first" "$work/prefix"
prefix=$work/prefix
echo "installed ($components) and moved to $prefix"

# Every public header is installed, and each #include "memoplan/..." in them resolves there.
expected=$(cd "$source" && find planner/include src/include interpose/include torch_ext/include \
             -name '*.h' | wc -l)
installed=$(find "$prefix/include" -name '*.h' | wc -l)
[ "$torch" = ON ] || expected=$((expected - $(find "$source/torch_ext/include" -name '*.h' | wc -l)))
if [ "$installed" -lt "$expected" ]; then
  echo "FAIL: $installed headers installed, $expected public headers in the source tree" >&2
  exit 1
fi
grep -rhoE '#include "memoplan/[^"]+"' "$prefix/include" | sed -E 's/#include "(.*)"/\1/' | sort -u |
  while read -r header; do
    [ -f "$prefix/include/$header" ] || { echo "FAIL: $header is included but not installed" >&2; exit 1; }
  done

# find_package(memoplan).
"$cmake" -S "$consumer" -B "$work/cmake" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DCONSUMER_TORCH="$torch" > "$work/cmake.log" ||
  { cat "$work/cmake.log" >&2; exit 1; }
"$cmake" --build "$work/cmake" > "$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
"$work/cmake/consumer"
grep -q "^$prefix/" "$work/cmake/preload_path.txt" ||
  { echo "FAIL: memoplan::preload is $(cat "$work/cmake/preload_path.txt"), not under $prefix" >&2; exit 1; }
[ "$torch" = ON ] && "$work/cmake/consumer_torch"

# The shim from the moved tree, found through the package: the consumer sees its statistics.
LD_PRELOAD=$(cat "$work/cmake/preload_path.txt") "$work/cmake/consumer" > "$work/preloaded.txt"
grep -q 'shim stats {' "$work/preloaded.txt" ||
  { echo "FAIL: no shim statistics under LD_PRELOAD:" >&2; cat "$work/preloaded.txt" >&2; exit 1; }

# pkg-config, relocated through ${pcfiledir}.
pc_dir=$(dirname "$(find "$prefix" -name memoplan.pc)")
export PKG_CONFIG_PATH=$pc_dir
pkg-config --validate memoplan
[ "$(realpath "$(pkg-config --variable=prefix memoplan)")" = "$(realpath "$prefix")" ] ||
  { echo "FAIL: memoplan.pc's prefix is $(pkg-config --variable=prefix memoplan)" >&2; exit 1; }
# shellcheck disable=SC2046  # the flags are words
"$cxx" -std=c++17 -O1 "$consumer/main.cc" $(pkg-config --cflags --libs memoplan) -o "$work/consumer_pc"
"$work/consumer_pc"

# The installed programs run from the moved tree (memoplan-run finds libmemoplan_torch.so.0
# through its RUNPATH).
"$prefix/bin/memoplan" --version
if [ "$torch" = ON ]; then
  # grep without -q: under pipefail, -q's early exit can kill ldd with SIGPIPE (a flaky failure).
  ldd "$prefix/bin/memoplan-run" | grep "libmemoplan_torch.so.0 => $prefix/" > /dev/null ||
    { echo "FAIL: memoplan-run does not find libmemoplan_torch.so.0 in $prefix:" >&2;
      ldd "$prefix/bin/memoplan-run" | grep memoplan >&2; exit 1; }
  "$prefix/bin/memoplan" run --help > /dev/null
  # plan(..., kernels = "tuned") loads libmemoplan_tuned.so.0 from beside libmemoplan_torch.so.0.
  torch_lib=$(ldd "$prefix/bin/memoplan-run" | sed -n 's/.*libmemoplan_torch.so.0 => \([^ ]*\) .*/\1/p')
  [ -e "$(dirname "$torch_lib")/libmemoplan_tuned.so.0" ] ||
    { echo "FAIL: no libmemoplan_tuned.so.0 beside $torch_lib" >&2; exit 1; }
fi
rm -rf "$prefix"  # 200+ MB of copies; the logs stay
echo "install.consumer: ok"

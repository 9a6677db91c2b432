#!/bin/bash
# Builds MiniMalloc (google/minimalloc at 9f5cf81) beside memoplan, outside its clone, against
# Debian 12's abseil (libabsl-dev 20220623), for bench/run_minimalloc_compare.py. Writes nothing into the memoplan clone.
#   SRC: where to check it out (default /work/minimalloc-src); BUILD: build folder (default
#   /work/minimalloc-build, which also holds the absl/log shim this script writes).
# Changes to MiniMalloc, none to its solver: its CMakeLists finds the system abseil instead of the
# external/ submodules and skips the tests (no googletest submodule); absl/log (newer than 20220623)
# is replaced by a 20-line shim (LOG prints one line to stderr, DLOG compiles to nothing, as
# abseil's own DLOG does under NDEBUG); converter.cc iterates absl::string_view, not
# std::string_view (Debian builds abseil with its own string_view).
set -euo pipefail
MIRROR=${MIRROR:-/work/.mirror/google+minimalloc/repo}
SRC=${SRC:-/work/minimalloc-src}
BUILD=${BUILD:-/work/minimalloc-build}

dpkg -s libabsl-dev >/dev/null 2>&1 || apt-get install -y libabsl-dev
[ -d "$SRC" ] || git clone -q "$MIRROR" "$SRC"
git -C "$SRC" checkout -q 9f5cf81

mkdir -p "$BUILD/shim/absl/log"
cat > "$BUILD/shim/absl/log/log.h" <<'EOF'
// Shim for building MiniMalloc against Debian 12's abseil 20220623, which predates absl/log.
// LOG(s) prints one line to stderr (no prefix, as main.cc asks); DLOG compiles to nothing.
#pragma once
#include <iostream>
#include <sstream>
namespace absl_log_shim {
struct Line {
  std::ostringstream s;
  ~Line() { std::cerr << s.str() << std::endl; }
};
}  // namespace absl_log_shim
#define LOG(severity) absl_log_shim::Line().s
#define DLOG(severity) \
  while (false) std::cerr
EOF
cat > "$BUILD/shim/absl/log/globals.h" <<'EOF'
// Shim (see log.h): no-op logging configuration.
#pragma once
#include "absl/base/log_severity.h"
namespace absl {
inline void SetStderrThreshold(absl::LogSeverityAtLeast) {}
inline void EnableLogPrefix(bool) {}
}  // namespace absl
EOF
cat > "$BUILD/shim/absl/log/initialize.h" <<'EOF'
// Shim (see log.h).
#pragma once
namespace absl {
inline void InitializeLog() {}
}  // namespace absl
EOF

cd "$SRC"
python3 - "$BUILD" <<'EOF'
import sys
build = sys.argv[1]
s = open("CMakeLists.txt").read()
s = s.replace("add_subdirectory(external/abseil-cpp EXCLUDE_FROM_ALL)\n"
              "add_subdirectory(external/googletest EXCLUDE_FROM_ALL)",
              f"find_package(absl REQUIRED)\ninclude_directories(BEFORE {build}/shim)")
s = s.replace("  absl::flags_parse\n  absl::log\n  absl::log_initialize\n", "  absl::flags_parse\n")
s = s.replace("if(NOT SKBUILD)\n  enable_testing()", "if(FALSE)\n  enable_testing()")
open("CMakeLists.txt", "w").write(s)
c = open("src/converter.cc").read()
c = c.replace("for (const std::string_view& record : records)",
              "for (const absl::string_view& record : records)")
open("src/converter.cc", "w").write(c)
EOF
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C "$BUILD" -j2 minimalloc
echo "built $BUILD/minimalloc"

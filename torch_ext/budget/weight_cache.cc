#include "weight_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace memoplan::torch_ext::budget {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kDefaultBound = uint64_t{8} << 30;
constexpr char kSuffix[] = ".weights";
constexpr char kPartial[] = ".tmp.";
constexpr size_t kHexDigits = 16;
constexpr size_t kNameSize = kHexDigits + sizeof kSuffix - 1;

// A name weight_file_name gives; nothing else in the directory is ours.
bool is_weight_file_name(const std::string& name) {
  if (name.size() != kNameSize || name.compare(kHexDigits, std::string::npos, kSuffix) != 0) {
    return false;
  }
  return std::all_of(name.begin(), name.begin() + kHexDigits, [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

// A partial_file_path of a process that no longer exists: a writer killed mid-file.
bool orphaned_partial_file(const std::string& name) {
  if (name.size() <= kNameSize + sizeof kPartial - 1 ||
      !is_weight_file_name(name.substr(0, kNameSize)) ||
      name.compare(kNameSize, sizeof kPartial - 1, kPartial) != 0) {
    return false;
  }
  const std::string pid_text = name.substr(kNameSize + sizeof kPartial - 1);
  if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

std::string weight_file_name(uint64_t hash) {
  char name[kNameSize + 1];
  std::snprintf(name, sizeof name, "%016llx%s", static_cast<unsigned long long>(hash), kSuffix);
  return name;
}

std::string partial_file_path(const std::string& path) {
  return path + kPartial + std::to_string(::getpid());
}

uint64_t weights_cache_bound_bytes() {
  const char* env = std::getenv("MEMOPLAN_WEIGHTS_CACHE_MIB");
  if (!env || !*env) return kDefaultBound;
  char* end = nullptr;
  const unsigned long long mib = std::strtoull(env, &end, 10);
  if (end == env || *end != '\0') return kDefaultBound;
  return static_cast<uint64_t>(mib) << 20;
}

void mark_used(const std::string& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // another user's file: left as it is
}

uint64_t trim_weights_dir(const std::string& dir, const std::string& keep, uint64_t bound) {
  struct Entry {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type used;
  };
  std::vector<Entry> files;
  uint64_t held = 0, removed = 0;
  std::error_code ec;
  const fs::path kept = fs::path(keep).lexically_normal();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code entry_ec;
    const uint64_t bytes = it->file_size(entry_ec);
    if (entry_ec) continue;  // removed meanwhile
    if (orphaned_partial_file(name)) {
      if (fs::remove(it->path(), entry_ec)) removed += bytes;
      continue;
    }
    if (!is_weight_file_name(name)) continue;
    held += bytes;
    if (it->path().lexically_normal() == kept) continue;
    const fs::file_time_type used = it->last_write_time(entry_ec);
    if (!entry_ec) files.push_back({it->path(), bytes, used});
  }
  if (bound == 0 || held <= bound) return removed;
  std::sort(files.begin(), files.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& file : files) {
    if (held <= bound) break;
    std::error_code remove_ec;
    if (fs::remove(file.path, remove_ec)) {
      held -= file.bytes;
      removed += file.bytes;
    }
  }
  return removed;
}

uint64_t trim_all_but(const std::string& dir, const std::string& keep) {
  return trim_weights_dir(dir, keep, 1);  // `keep` is counted, so no other file fits in 1 byte
}

}  // namespace memoplan::torch_ext::budget

#include "memoplan/process_status.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace memoplan {

uint64_t status_bytes(const char* field) {
  unsigned long long kib = 0;
  const size_t length = std::strlen(field);
  if (std::FILE* status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, status)) {
      if (std::strncmp(line, field, length) == 0 && line[length] == ':') {
        if (std::sscanf(line + length + 1, "%llu", &kib) != 1) kib = 0;
        break;
      }
    }
    std::fclose(status);
  }
  return kib * 1024;
}

uint64_t resident_bytes(const void* start, uint64_t bytes) {
  if (bytes == 0) return 0;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = reinterpret_cast<uintptr_t>(start) / page;
  const uint64_t pages = (reinterpret_cast<uintptr_t>(start) + bytes + page - 1) / page - first;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t resident = 0;
  uint64_t entries[1024];
  for (uint64_t done = 0; done < pages;) {
    const uint64_t n = std::min<uint64_t>(sizeof entries / 8, pages - done);
    const ssize_t got = ::pread(fd, entries, n * 8, static_cast<off_t>((first + done) * 8));
    if (got <= 0) break;
    for (ssize_t i = 0; i < got / 8; ++i) resident += (entries[i] >> 63) & 1;  // present
    done += static_cast<uint64_t>(got) / 8;
  }
  ::close(fd);
  return resident * page;
}

}  // namespace memoplan

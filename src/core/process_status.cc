#include "memoplan/process_status.h"

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

}  // namespace memoplan

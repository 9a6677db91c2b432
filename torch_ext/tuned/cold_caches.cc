#include "cold_caches.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace memoplan::torch_ext::tuned {
namespace {

// "32768K" (sysfs' cache size format) in bytes; 0 when unreadable.
size_t parse_size(const std::string& text) {
  size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    value = value * 10 + (text[i++] - '0');
  if (i < text.size() && text[i] == 'K') value <<= 10;
  if (i < text.size() && text[i] == 'M') value <<= 20;
  return value;
}

}  // namespace

size_t last_level_cache_bytes() {
  // The highest level listed for cpu0 (sysfs gives the cache this CPU shares; sysconf may give a
  // whole package's on a virtual machine).
  size_t best_level = 0, bytes = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), type_file(dir + "/type"), size_file(dir + "/size");
    size_t level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction" || level < best_level) continue;
    best_level = level;
    bytes = parse_size(size);
  }
  if (bytes == 0) {
    const long conf = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (conf > 0) bytes = static_cast<size_t>(conf);
  }
  return bytes ? bytes : size_t{32} << 20;
}

CacheEvictor::CacheEvictor() {
  bytes_ = std::min(2 * last_level_cache_bytes(), size_t{128} << 20);
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    bytes_ = 0;  // no eviction: the measurement runs warm
    return;
  }
  data_ = static_cast<char*>(p);
  // Written once: an untouched anonymous page reads as the one shared zero page, which would
  // evict nothing.
  std::memset(data_, 1, bytes_);
}

CacheEvictor::~CacheEvictor() {
  if (data_) munmap(data_, bytes_);
}

void CacheEvictor::evict() {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes_; i += 64) sum += static_cast<unsigned char>(data_[i]);
  // Keeps the loop: the sum is used.
  asm volatile("" : : "r"(sum) : "memory");
}

}  // namespace memoplan::torch_ext::tuned

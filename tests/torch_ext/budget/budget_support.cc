// What the memory budget's tests share (budget_support.h).
#include "budget_support.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

namespace memoplan::torch_ext::budget_test {

torch::jit::Module network() {
  torch::manual_seed(0);
  torch::jit::Module m("Budgeted");
  m.register_parameter("c1", torch::randn({32, 3, 3, 3}), false);
  m.register_parameter("c2", torch::randn({64, 32, 3, 3}) * 0.1, false);
  m.register_parameter("w1", torch::randn({512, 1024}) * 0.05, false);
  m.register_parameter("b1", torch::randn({512}), false);
  m.register_parameter("w2", torch::randn({256, 512}) * 0.05, false);
  m.register_parameter("b2", torch::randn({256}), false);
  m.register_parameter("w3", torch::randn({128, 256}) * 0.05, false);
  m.define(R"(
    def forward(self, x):
        y = torch.relu(torch.conv2d(x, self.c1, None, [1, 1], [1, 1]))
        y = torch.relu(torch.conv2d(y, self.c2, None, [2, 2], [1, 1]))
        y = torch.adaptive_avg_pool2d(y, [4, 4]).flatten(1)
        y = torch.relu(torch.linear(y, self.w1, self.b1))
        y = torch.relu(torch.linear(y, self.w2, self.b2))
        return torch.linear(y, self.w3, None)
  )");
  m.eval();
  return m;
}

std::string temp_dir() {
  char name[] = "/tmp/memoplan-budget-test-XXXXXX";
  const char* made = mkdtemp(name);
  return made ? made : "/tmp";
}

PlanOptions budgeted(uint64_t bytes, const std::string& dir) {
  PlanOptions options;
  options.budget_bytes = bytes;
  options.weights_dir = dir;
  return options;
}

bool maps_large_folios(const std::string& dir) {
  const std::string path = dir + "/folio-probe";
  const size_t size = 4 * kMiB, probe = 64 << 10;
  {
    std::vector<char> data(size, 1);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    const bool written = ::write(fd, data.data(), size) == static_cast<ssize_t>(size);
    ::close(fd);
    if (!written) return false;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* base = fd < 0 ? MAP_FAILED : ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  uint64_t mapped = 0;
  if (base != MAP_FAILED) {
    char* at = static_cast<char*>(base) + kMiB;
    ::madvise(base, size, MADV_RANDOM);
    ::posix_fadvise(fd, kMiB, probe, POSIX_FADV_WILLNEED);
#ifdef MADV_POPULATE_READ
    if (::madvise(at, probe, MADV_POPULATE_READ) != 0)
#endif
    {
      volatile char sink = 0;
      for (size_t i = 0; i < probe; i += 4096) sink = sink + at[i];
    }
    const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    std::vector<uint64_t> entries(size / 4096);
    if (pagemap >= 0 &&
        ::pread(pagemap, entries.data(), entries.size() * 8,
                static_cast<off_t>(reinterpret_cast<uintptr_t>(base) / 4096 * 8)) > 0) {
      for (uint64_t e : entries) mapped += ((e >> 63) & 1) * 4096;
    }
    if (pagemap >= 0) ::close(pagemap);
    ::munmap(base, size);
  }
  if (fd >= 0) ::close(fd);
  std::filesystem::remove(path);
  return mapped > 256 * 1024;
}

uint64_t mapped_bytes(const void* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page;
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::vector<uint64_t> entries(last - first);
  const ssize_t got = pread(fd, entries.data(), entries.size() * 8, static_cast<off_t>(first * 8));
  close(fd);
  uint64_t mapped = 0;
  for (ssize_t i = 0; i < got / 8; ++i)
    mapped += ((entries[static_cast<size_t>(i)] >> 63) & 1) * page;
  return mapped;
}

}  // namespace memoplan::torch_ext::budget_test

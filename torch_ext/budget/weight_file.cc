#include "weight_file.h"

#include <c10/core/StorageImpl.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "memoplan/process_status.h"
#include "weight_cache.h"

namespace memoplan::torch_ext::budget {
namespace {

constexpr uint64_t kTensorAlign = 64;

uint64_t round_up(uint64_t bytes, uint64_t align) { return (bytes + align - 1) / align * align; }

std::runtime_error system_error(const std::string& what, const std::string& path) {
  return std::runtime_error("memoplan budget: " + what + " " + path + ": " + std::strerror(errno));
}

// FNV-1a over 8-byte words (and the tail), with the layout mixed in: names the file.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  void word(uint64_t w) { h = (h ^ w) * 1099511628211ull; }
  void bytes(const char* p, uint64_t n) {
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      word(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, n - i);
    word(tail ^ n);
  }
};

constexpr uint64_t kVerifyChunk = uint64_t{4} << 20;

// pread()s exactly `n` bytes at `offset`.
bool read_all(int fd, char* p, uint64_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// Storages point into a mapping until they die; the mapping goes when its last storage and its
// WeightFile owner have. Keyed by the mapping's base.
std::mutex registry_mutex;
struct Mapped {
  std::shared_ptr<WeightFile> file;
  uint64_t storages = 0;
};
std::map<const char*, Mapped>& registry() {
  static auto* map = new std::map<const char*, Mapped>();  // never destroyed: deleters run late
  return *map;
}

void weight_deleter(void* ctx) {
  std::shared_ptr<WeightFile> last;  // unmapped outside the lock
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().upper_bound(static_cast<const char*>(ctx));
  if (it == registry().begin()) return;
  --it;
  if (--it->second.storages == 0) {
    last = std::move(it->second.file);
    registry().erase(it);
  }
}

// Writes a file through an aligned buffer with O_DIRECT where the file system takes it: the page
// cache then holds none of it, and the mapping's reads bring it in a page at a time. Written
// through the cache instead, it stays there in large folios, which a fault maps whole: measured,
// touching one byte of a file just written mapped 2 MiB, of the same file evicted first 4 KiB.
class FileWriter {
 public:
  explicit FileWriter(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ < 0) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    buffer_ = static_cast<char*>(std::aligned_alloc(kAlign, kBuffer));
  }
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
    std::free(buffer_);
  }
  bool opened() const { return fd_ >= 0 && buffer_; }
  // `p` null: zeros.
  bool append(const char* p, uint64_t n) {
    while (n > 0) {
      const uint64_t take = std::min<uint64_t>(n, kBuffer - used_);
      if (p) {
        std::memcpy(buffer_ + used_, p, take);
        p += take;
      } else {
        std::memset(buffer_ + used_, 0, take);
      }
      used_ += take;
      n -= take;
      if (used_ == kBuffer && !flush()) return false;
    }
    return true;
  }
  // The file's length must be a multiple of the page by now (it is: groups are page-aligned).
  bool finish() { return flush() && ::fsync(fd_) == 0; }

 private:
  static constexpr uint64_t kAlign = 4096, kBuffer = 1 << 20;
  bool flush() {
    if (used_ > 0 && !write_all(fd_, buffer_, used_)) return false;
    used_ = 0;
    return true;
  }
  static bool write_all(int fd, const char* p, uint64_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= static_cast<uint64_t>(w);
    }
    return true;
  }
  int fd_ = -1;
  char* buffer_ = nullptr;
  uint64_t used_ = 0;
};

// Makes `where` and its parents; true when the process may write there.
bool writable_dir(const std::string& where) {
  for (size_t at = 1; at <= where.size(); ++at) {
    if (at == where.size() || where[at] == '/') ::mkdir(where.substr(0, at).c_str(), 0755);
  }
  return ::access(where.c_str(), W_OK | X_OK) == 0;
}

// Writes the storages at their places into `path` (`size` bytes): beside it first, then renamed,
// so a reader never sees half a file. False (errno kept) when it could not be written.
bool write_file(const std::vector<std::vector<c10::StorageImpl*>>& groups,
                const std::vector<std::vector<uint64_t>>& places, uint64_t size,
                const std::string& path) {
  const std::string tmp = partial_file_path(path);
  bool ok = false;
  {
    FileWriter out(tmp);
    if (!out.opened()) return false;
    ok = true;
    uint64_t written = 0;
    for (size_t g = 0; g < groups.size() && ok; ++g) {
      for (size_t i = 0; i < groups[g].size() && ok; ++i) {
        ok = out.append(nullptr, places[g][i] - written);
        const uint64_t n = groups[g][i]->nbytes();
        ok = ok && out.append(static_cast<const char*>(groups[g][i]->data()), n);
        written = places[g][i] + n;
      }
    }
    ok = ok && out.append(nullptr, size - written) && out.finish();
  }
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
  }
  return ok;
}

}  // namespace

std::string weights_dir(const std::string& dir) {
  // Asked for by name (the argument, $MEMOPLAN_WEIGHTS_DIR): that one, or an error naming it.
  std::string where = dir;
  if (where.empty()) {
    if (const char* env = std::getenv("MEMOPLAN_WEIGHTS_DIR"); env && *env) where = env;
  }
  if (!where.empty()) {
    writable_dir(where);
    return where;
  }
  // Else the user's cache, or where that cannot be written (a service user whose $HOME is not its
  // own) a directory of the user's in /tmp.
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) {
    where = std::string(cache) + "/memoplan/weights";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    where = std::string(home) + "/.cache/memoplan/weights";
  }
  if (!where.empty() && writable_dir(where)) return where;
  where = "/tmp/memoplan-weights-" + std::to_string(::getuid());
  writable_dir(where);
  return where;
}

uint64_t page_bytes() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::shared_ptr<WeightFile> WeightFile::map(
    const std::vector<std::vector<c10::StorageImpl*>>& groups, const std::string& dir) {
  std::shared_ptr<WeightFile> file(new WeightFile());
  const uint64_t page = page_bytes();
  // Layout: each group page-aligned, its storages 64-byte aligned inside.
  std::vector<std::vector<uint64_t>> places(groups.size());
  Hash hash;
  uint64_t at = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    file->offsets_.push_back(at);
    uint64_t in = 0;
    for (c10::StorageImpl* storage : groups[g]) {
      places[g].push_back(at + in);
      hash.word(at + in);
      hash.word(storage->nbytes());
      hash.bytes(static_cast<const char*>(storage->data()), storage->nbytes());
      in = round_up(in + storage->nbytes(), kTensorAlign);
    }
    file->bytes_.push_back(round_up(std::max<uint64_t>(in, 1), page));
    at += file->bytes_.back();
  }
  file->size_ = at;
  file->path_ = dir + "/" + weight_file_name(hash.h);

  // Written unless there, then opened; written again if another process's trim removed it in
  // between. A full disk is cleared of the other weight files once and the write tried again.
  for (int attempt = 0;; ++attempt) {
    struct stat st {};
    if (::stat(file->path_.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == at) {
      mark_used(file->path_);
    } else {
      ::mkdir(dir.c_str(), 0755);
      if (!write_file(groups, places, at, file->path_)) {
        int error = errno;
        if (error == ENOSPC && trim_all_but(dir, file->path_) > 0) {
          error = write_file(groups, places, at, file->path_) ? 0 : errno;
        }
        if (error != 0) {
          errno = error;  // the write's, not the trim's
          throw system_error("cannot write the weight file", file->path_);
        }
      }
      trim_weights_dir(dir, file->path_, weights_cache_bound_bytes());
    }
    file->fd_ = ::open(file->path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (file->fd_ >= 0) break;
    if (errno != ENOENT || attempt > 0) {
      throw system_error("cannot open the weight file", file->path_);
    }
  }
  // Verified before any storage moves: a file of the same name and size but other bytes (a hash
  // collision, a file changed behind our back) leaves the module as it was. Read in chunks into a
  // buffer, not through the mapping: no page of it is mapped beside the heap copy (BERT's 94 MiB
  // embedding, checked through the mapping, held 94 MiB more at once), and the file is read
  // sequentially, not a page per fault.
  {
    std::vector<char> chunk(kVerifyChunk);
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        const char* data = static_cast<const char*>(groups[g][i]->data());
        for (uint64_t done = 0, n = groups[g][i]->nbytes(); done < n;) {
          const uint64_t take = std::min<uint64_t>(n - done, kVerifyChunk);
          if (!read_all(file->fd_, chunk.data(), take, places[g][i] + done) ||
              std::memcmp(chunk.data(), data + done, take) != 0) {
            throw std::runtime_error("memoplan budget: " + file->path_ +
                                     " does not hold this module's weights (remove it)");
          }
          done += take;
        }
      }
    }
  }
  if (at > 0) {
    void* base = ::mmap(nullptr, at, PROT_READ, MAP_SHARED, file->fd_, 0);
    if (base == MAP_FAILED) throw system_error("cannot map the weight file", file->path_);
    file->base_ = static_cast<char*>(base);
    // Loads are ours: no read-around beyond what we ask for, and no huge page mappings (a
    // 2 MiB mapping would keep up to 2 MiB beside a range we load or drop resident).
    ::madvise(base, at, MADV_RANDOM);
    ::madvise(base, at, MADV_NOHUGEPAGE);
    // A file reused, or written where O_DIRECT is refused, may sit in the page cache in large
    // folios, which a fault maps whole (up to 2 MiB past a range we load, measured): evicted, it
    // comes back through the mapping's random reads a page at a time.
    file->drop_page_cache();
  }
  uint64_t storages = 0;
  for (const auto& group : groups) storages += group.size();
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry()[file->base_] = Mapped{file, storages};
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      char* p = file->base_ + places[g][i];
      // The context is the data pointer, as oneDNN expects of every CPU DataPtr.
      groups[g][i]->set_data_ptr_noswap(
          c10::DataPtr(p, p, &weight_deleter, c10::Device(c10::kCPU)));
    }
  }
  return file;
}

WeightFile::~WeightFile() {
  if (base_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void WeightFile::populate(uint64_t offset, uint64_t bytes) const {
  const uint64_t page = page_bytes();
  const uint64_t begin = offset / page * page;
  const uint64_t end = std::min(size_, round_up(offset + bytes, page));
  if (begin >= end) return;
  // Read ahead first: from disk in large requests (the faults of a MADV_RANDOM mapping read a page
  // at a time: vgg16 under a 50% budget with a cold page cache took 6.75 s a pass against 0.38 s
  // warm), into the cache a page per folio (the kernel's explicit read-ahead allocates the
  // smallest folios, unlike the read-ahead of faults), so the mapping still takes in only the
  // range. In 1 MiB requests: the kernel cuts one request to its read-ahead window and reads no
  // more (bench/page_cache_folios.py: 256 MiB cold in 4.0 s with one request, 0.14 s in 1 MiB
  // ones).
  constexpr uint64_t kReadAhead = 1 << 20;
  for (uint64_t at = begin; at < end; at += kReadAhead) {
    ::posix_fadvise(fd_, static_cast<off_t>(at), static_cast<off_t>(std::min(kReadAhead, end - at)),
                    POSIX_FADV_WILLNEED);
  }
  static std::atomic<bool> populate_works{true};
  if (populate_works.load(std::memory_order_relaxed) &&
      ::madvise(base_ + begin, end - begin, MADV_POPULATE_READ) == 0) {
    return;
  }
  if (errno == EINVAL) populate_works.store(false, std::memory_order_relaxed);  // before 5.14
  volatile char sink = 0;
  for (uint64_t at = begin; at < end; at += page) sink = sink + base_[at];
}

void WeightFile::drop(uint64_t offset, uint64_t bytes) const {
  const uint64_t page = page_bytes();
  const uint64_t begin = round_up(offset, page);
  const uint64_t end = std::min(size_, (offset + bytes) / page * page);
  if (begin < end) ::madvise(base_ + begin, end - begin, MADV_DONTNEED);
}

uint64_t WeightFile::resident_bytes(uint64_t offset, uint64_t bytes) const {
  const uint64_t page = page_bytes();
  const uint64_t from = std::min(size_, offset / page * page);
  const uint64_t to = std::min(size_, (offset + bytes) / page * page);  // whole pages inside
  return to > from ? memoplan::resident_bytes(base_ + from, to - from) : 0;
}

void WeightFile::drop_page_cache() const {
  if (fd_ >= 0) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

}  // namespace memoplan::torch_ext::budget

// A module's weights in a file-backed mapping: written once to a file named by a hash of their
// bytes (reused by every later run of the same weights), mapped read-only and shared, and each
// weight's storage pointed into the mapping, so its pages are the kernel's to drop (populate()
// loads a range, drop() gives its pages back: the file still holds them). Weights are laid out in
// groups (those loaded and dropped together), each group page-aligned. No torch headers here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace c10 {
struct StorageImpl;
}

namespace memoplan::torch_ext::budget {

class WeightFile {
 public:
  // groups[g]: the storages of group g; the first is at the group's start (a sliced linear's
  // weight). Writes `dir`/<hash>.weights unless it exists (then trims `dir` to its bound,
  // weight_cache.h), maps it and points every storage at its bytes there (the storages' own
  // memory is freed). Throws std::runtime_error (naming the
  // file) when the directory cannot be written or the file cannot be mapped.
  static std::shared_ptr<WeightFile> map(const std::vector<std::vector<c10::StorageImpl*>>& groups,
                                         const std::string& dir);
  ~WeightFile();
  WeightFile(const WeightFile&) = delete;
  WeightFile& operator=(const WeightFile&) = delete;

  size_t groups() const { return offsets_.size(); }
  uint64_t group_offset(size_t g) const { return offsets_[g]; }
  uint64_t group_bytes(size_t g) const { return bytes_[g]; }  // whole pages
  uint64_t bytes() const { return size_; }
  const std::string& path() const { return path_; }
  const char* base() const { return base_; }

  // Prefaults [offset, offset + bytes) of the mapping (read ahead into the page cache, then
  // MADV_POPULATE_READ, or a read a page where the kernel lacks it); drop() gives back the whole
  // pages inside the range (MADV_DONTNEED).
  void populate(uint64_t offset, uint64_t bytes) const;
  void drop(uint64_t offset, uint64_t bytes) const;
  // The mapping's bytes resident in this process (its page table, /proc/self/pagemap): all of
  // it, or the whole pages of [offset, offset + bytes).
  uint64_t resident_bytes() const { return resident_bytes(0, size_); }
  uint64_t resident_bytes(uint64_t offset, uint64_t bytes) const;
  // Asks the kernel to evict the file from the page cache (pages mapped stay): a cold start.
  void drop_page_cache() const;

 private:
  WeightFile() = default;
  std::vector<uint64_t> offsets_, bytes_;
  uint64_t size_ = 0;
  std::string path_;
  char* base_ = nullptr;
  int fd_ = -1;
};

// `dir`, or where empty $MEMOPLAN_WEIGHTS_DIR, else (where it can be written)
// $XDG_CACHE_HOME/memoplan/weights, else ~/.cache/memoplan/weights, else
// /tmp/memoplan-weights-UID; made if missing.
std::string weights_dir(const std::string& dir);

// The page size the mapping is laid out in.
uint64_t page_bytes();

}  // namespace memoplan::torch_ext::budget

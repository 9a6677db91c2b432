// The weight files' directory is a cache of bounded size: each module's weights go to a file named
// by their hash (weight_file.h), so every new set of weights (a retrained model, a new version, a
// benchmark over many models) adds one, and nothing else would ever remove them (a sweep of the
// torchvision models filled a 33 GB disk). After a file is written, the least recently used
// others go until the directory holds at most the bound; a file in use is marked used. Removing a
// file another process has mapped is safe: its mapping keeps the data until it is unmapped, and a
// process that finds a file gone between its check and its open writes it again. No torch here.
#pragma once

#include <cstdint>
#include <string>

namespace memoplan::torch_ext::budget {

// The names of the directory's files, made here and nowhere else (trim_weights_dir parses them):
// "<16 hex digits of the weights' hash>.weights" ...
std::string weight_file_name(uint64_t hash);
// ... and, while a writer fills it before renaming it to `path`, "<path>.tmp.<the writer's pid>".
std::string partial_file_path(const std::string& path);

// The bound: $MEMOPLAN_WEIGHTS_CACHE_MIB MiB (0: none), else 8 GiB.
uint64_t weights_cache_bound_bytes();

// Marks the weight file `path` as just used (its modification time), so that it goes last.
void mark_used(const std::string& path);

// Removes from `dir` the partial files of writers that are gone (`<name>.tmp.<pid>` whose process
// does not exist) and then, least recently used first, the weight files (`<16 hex>.weights`) other
// than `keep` until those left hold at most `bound` bytes (`keep` counted; `bound` 0: none).
// Returns the bytes removed. Other files in `dir` are never touched.
uint64_t trim_weights_dir(const std::string& dir, const std::string& keep, uint64_t bound);

// trim_weights_dir that leaves only `keep` (a full disk): every other weight file goes.
uint64_t trim_all_but(const std::string& dir, const std::string& keep);

}  // namespace memoplan::torch_ext::budget

// The weight files' directory is a bounded cache (budget/weight_cache.h): the least recently used
// weight files go beyond the bound, never the one just written or anything that is not a weight
// file; partial files of writers that died go; a weight file removed while another module maps it
// leaves that module's weights readable, and is written again when next asked for.
#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "budget/weight_cache.h"
#include "budget/weight_file.h"

namespace memoplan::torch_ext::budget {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const fs::path& path, size_t bytes, int age_seconds) {
  std::ofstream(path, std::ios::binary) << std::string(bytes, 'w');
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(age_seconds));
}

// A process id that is not running: a child that has exited and been reaped.
pid_t gone_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// $MEMOPLAN_WEIGHTS_CACHE_MIB set for one scope.
class BoundEnv {
 public:
  explicit BoundEnv(const char* value) {
    if (const char* v = std::getenv(kName)) saved_ = v;
    if (value) {
      ::setenv(kName, value, 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ~BoundEnv() {
    if (saved_) {
      ::setenv(kName, saved_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }

 private:
  static constexpr const char* kName = "MEMOPLAN_WEIGHTS_CACHE_MIB";
  std::optional<std::string> saved_;
};

TEST(WeightCache, TheBoundIsTheEnvironmentsInMiBElseEightGiB) {
  {
    BoundEnv env(nullptr);
    EXPECT_EQ(weights_cache_bound_bytes(), uint64_t{8} << 30);
  }
  {
    BoundEnv env("300");
    EXPECT_EQ(weights_cache_bound_bytes(), uint64_t{300} << 20);
  }
  {
    BoundEnv env("0");
    EXPECT_EQ(weights_cache_bound_bytes(), 0u) << "0: no bound";
  }
  {
    BoundEnv env("2G");
    EXPECT_EQ(weights_cache_bound_bytes(), uint64_t{8} << 30) << "not a number of MiB: default";
  }
}

TEST(WeightCache, TrimRemovesTheLeastRecentlyUsedWeightFilesBeyondTheBoundAndNothingElse) {
  const fs::path dir = fresh_dir("memoplan-weight-cache-trim");
  constexpr size_t kMiB = 1 << 20;
  EXPECT_EQ(weight_file_name(0xa1), "00000000000000a1.weights");
  const fs::path oldest = dir / weight_file_name(0xa1);
  const fs::path older = dir / weight_file_name(0xa2);
  const fs::path kept = dir / weight_file_name(0xa3);  // the one just written: the oldest too
  const fs::path used = dir / weight_file_name(0xa4);
  write_bytes(oldest, kMiB, 400);
  write_bytes(older, kMiB, 300);
  write_bytes(kept, kMiB, 500);
  write_bytes(used, kMiB, 600);
  mark_used(used.string());  // now the most recent
  const fs::path other = dir / "notes.weights";  // not a name memoplan gives
  write_bytes(other, 4 * kMiB, 900);
  const fs::path dead = dir / (weight_file_name(0xb1) + ".tmp." + std::to_string(gone_pid()));
  const fs::path live = partial_file_path((dir / weight_file_name(0xb2)).string());
  EXPECT_EQ(live.filename().string(), "00000000000000b2.weights.tmp." + std::to_string(::getpid()));
  write_bytes(dead, kMiB, 0);
  write_bytes(live, kMiB, 0);

  EXPECT_EQ(trim_weights_dir(dir.string(), kept.string(), 2 * kMiB), 3 * kMiB);
  EXPECT_FALSE(fs::exists(oldest));
  EXPECT_FALSE(fs::exists(older));
  EXPECT_TRUE(fs::exists(kept)) << "the file just written stays, however old";
  EXPECT_TRUE(fs::exists(used)) << "marked used: the most recent";
  EXPECT_TRUE(fs::exists(other)) << "not a weight file: never touched";
  EXPECT_FALSE(fs::exists(dead)) << "a writer that died leaves nothing behind";
  EXPECT_TRUE(fs::exists(live)) << "a writer at work keeps its file";
  EXPECT_EQ(trim_weights_dir(dir.string(), kept.string(), 0), 0u) << "0: no bound";
  EXPECT_EQ(trim_weights_dir(dir.string(), kept.string(), 2 * kMiB), 0u) << "within the bound";
  EXPECT_EQ(trim_all_but(dir.string(), kept.string()), kMiB) << "a full disk: all other files go";
  EXPECT_TRUE(fs::exists(kept));
  EXPECT_FALSE(fs::exists(used));
  EXPECT_TRUE(fs::exists(other));
  fs::remove_all(dir);
}

// Weights of `bytes` with values from `seed`, their storage as WeightFile::map takes it.
at::Tensor weights(int64_t bytes, int seed) {
  at::manual_seed(seed);
  return at::randn({bytes / 4});
}

TEST(WeightCache, AFileRemovedWhileMappedStillReadsAndIsWrittenAgainWhenAskedFor) {
  const fs::path dir = fresh_dir("memoplan-weight-cache-mapped");
  BoundEnv env("1");  // 1 MiB: each new file evicts the others
  constexpr int64_t kBytes = 3 << 19;  // 1.5 MiB
  at::Tensor a = weights(kBytes, 1);
  const at::Tensor a_values = a.clone();
  const auto file_a = WeightFile::map({{a.storage().unsafeGetStorageImpl()}}, dir.string());
  ASSERT_TRUE(fs::exists(file_a->path()));

  at::Tensor b = weights(kBytes, 2);
  const auto file_b = WeightFile::map({{b.storage().unsafeGetStorageImpl()}}, dir.string());
  EXPECT_TRUE(fs::exists(file_b->path())) << "the file just written stays over the bound";
  EXPECT_FALSE(fs::exists(file_a->path())) << "the least recently used goes";
  file_a->drop(0, file_a->bytes());  // its pages read again from the unlinked file
  EXPECT_TRUE(at::equal(a, a_values)) << "a mapping outlives its file's name";

  at::Tensor a_again = weights(kBytes, 1);
  const auto file_a_again =
      WeightFile::map({{a_again.storage().unsafeGetStorageImpl()}}, dir.string());
  EXPECT_EQ(file_a_again->path(), file_a->path());
  EXPECT_TRUE(fs::exists(file_a_again->path())) << "written again";
  EXPECT_TRUE(at::equal(a_again, a_values));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace memoplan::torch_ext::budget

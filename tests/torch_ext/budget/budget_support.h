// What the memory budget's tests share: a small network (two convolutions, three linears), a
// scratch folder for its weight file, the options, and probes of what the kernel maps.
#pragma once

#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext::budget_test {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kWeights =
    (32 * 3 * 9 + 64 * 32 * 9 + 512 * 1024 + 512 + 256 * 512 + 256 + 128 * 256) * 4;

// Two convolutions, then three linears, the first with a 2 MiB weight (512 x 1024 floats: a shape
// whose row slices OpenBLAS computes bit for bit like the whole, measured).
torch::jit::Module network();
std::string temp_dir();
PlanOptions budgeted(uint64_t bytes, const std::string& dir);
// Whether a fault on a file mapping in `dir` maps far more than the budget's fault-around slack
// (256 KiB): a kernel whose page cache holds a file just written in large folios (6.18 on ext4:
// 2 MiB) maps the whole folio of a 64 KiB MADV_POPULATE_READ. The budget counts pages, so a
// loaded slice then holds its folio's neighbours too (docs/BUDGET.md, "Limits").
bool maps_large_folios(const std::string& dir);
// The bytes of [p, p + bytes) mapped in this process now (/proc/self/pagemap's present bit).
uint64_t mapped_bytes(const void* p, size_t bytes);

class Budget : public ::testing::Test {
 protected:
  // The modules (test locals) are gone by now: their weight files are unmapped.
  void TearDown() override { std::filesystem::remove_all(dir); }
  c10::InferenceMode inference;
  const std::string dir = temp_dir();
  const at::Tensor x = torch::randn({1, 3, 32, 32});
};

}  // namespace memoplan::torch_ext::budget_test

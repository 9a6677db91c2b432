// AOTInductor packages (.pt2: torch.export, then torch._inductor.aoti_compile_and_package), the
// format PyTorch 2.x documents for C++ deployment, loaded with the loader LibTorch >= 2.6 ships
// (torch::inductor::AOTIModelPackageLoader). memoplan plans a package's run() as one call
// (PlannedCall, call_plan.h): memoplan run and memoplan-serve run .pt2 files this way. No torch
// headers here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace c10 {
struct IValue;
}

namespace memoplan::torch_ext {

// Whether `path` names an AOTInductor package (its extension is .pt2).
bool is_aoti_package(std::string_view path);
// Whether this build can load packages (LibTorch >= 2.6).
bool aoti_supported();
// Why this build cannot run the package at `path`, in a line for the user: the LibTorch version it
// was built with, and what to use instead.
std::string aoti_package_unsupported(const std::string& path);

// One loaded package: its compiled model (a shared library extracted from the package and
// loaded; each AotiPackage has a copy of its own, weights included) and its metadata.
class AotiPackage {
 public:
  // Throws std::runtime_error: this build cannot load packages (aoti_package_unsupported), or the
  // file is not one ("PATH: not an AOTInductor package (.pt2) LibTorch 2.6.0 loads (why)").
  // `concurrency`: how many run() calls may run at once. LibTorch 2.6's loader makes a container
  // of one model (every run() waits for it); above 1, a CPU package's library is run by a
  // container of that many models (AOTIModelContainerRunnerCpu), sharing its constants in place.
  explicit AotiPackage(const std::string& path, size_t concurrency = 1);
  ~AotiPackage();
  AotiPackage(const AotiPackage&) = delete;
  AotiPackage& operator=(const AotiPackage&) = delete;

  // The package's metadata: what was given at export as
  // inductor_configs={"aot_inductor.metadata": {...}}, plus the loader's own (AOTI_DEVICE_KEY).
  // memoplan reads "input_shape", "input_dtype" and "input_high" as it does a TorchScript file's
  // extra files.
  const std::map<std::string, std::string>& metadata() const;
  // One metadata value, "" when absent (as a TorchScript file's missing extra file reads).
  std::string metadata(const std::string& key) const;
  // How many tensors run() takes and returns: the leaves of the exported call's input and output
  // specs (pytree), in run()'s order.
  size_t input_count() const;
  size_t output_count() const;
  // The bytes of the package's constants (its weights): AOTInductor links them into the model's
  // library between the symbols _binary_constants_bin_start and _end, read from the symbol table
  // of the library the loader extracted. The model runs on them in place (file-backed pages,
  // resident once a run reads them). 0 where they are not found (another package loading at the
  // same moment, a stripped library, constants kept outside it).
  uint64_t weight_bytes() const;
  // How many run() calls can run at once (1 where the model library was not found).
  size_t concurrency() const;
  // The package's run() on `inputs` (tensors, in the exported forward's order); its outputs as a
  // list of tensors. Thread-safe; concurrency() calls run at once, the others wait. Throws std::invalid_argument for a non-tensor input; what run() throws (a
  // c10::Error: a wrong count, shape or dtype) passes through.
  c10::IValue run(const std::vector<c10::IValue>& inputs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memoplan::torch_ext

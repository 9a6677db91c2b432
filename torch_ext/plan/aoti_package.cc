#include "memoplan/torch/aoti_package.h"

#include <ATen/core/ivalue.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>


#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define MEMOPLAN_HAVE_AOTI 1
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner_cpu.h>
#endif

namespace memoplan::torch_ext {

bool is_aoti_package(std::string_view path) {
  constexpr std::string_view kExtension = ".pt2";
  return path.size() > kExtension.size() &&
         path.substr(path.size() - kExtension.size()) == kExtension;
}

#ifdef MEMOPLAN_HAVE_AOTI

bool aoti_supported() { return true; }

std::string aoti_package_unsupported(const std::string&) { return ""; }

namespace {

// The leaves of a pytree spec as torch.export writes it: [version, node], each node
// {"type": ..., "context": ..., "children_spec": [...]}, a leaf's type null.
size_t count_leaves(const nlohmann::json& node) {
  if (!node.is_object()) return 0;
  const auto type = node.find("type");
  if (type != node.end() && type->is_null()) return 1;
  size_t leaves = 0;
  if (const auto children = node.find("children_spec");
      children != node.end() && children->is_array()) {
    for (const nlohmann::json& child : *children) leaves += count_leaves(child);
  }
  return leaves;
}

// The model libraries loaded in this process: AOTIModelPackageLoader extracts a package's into
// a directory of its own, .../data/aotinductor/MODEL/NAME.so, and loads it from there.
std::set<std::string> loaded_model_libraries() {
  std::set<std::string> libraries;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name && std::strstr(info->dlpi_name, "/data/aotinductor/")) {
          static_cast<std::set<std::string>*>(out)->insert(info->dlpi_name);
        }
        return 0;
      },
      &libraries);
  return libraries;
}

// The distance between the symbols _binary_constants_bin_start and _end in the symbol table of
// the ELF file at `path` (where AOTInductor links the constants' blob); 0 when either is missing.
uint64_t constants_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  auto read = [&](uint64_t offset, void* out, size_t bytes) {
    in.seekg(static_cast<std::streamoff>(offset));
    return static_cast<bool>(in.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes)));
  };
  Elf64_Ehdr header{};
  if (!read(0, &header, sizeof header) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr)) {
    return 0;
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  if (!read(header.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr))) return 0;
  uint64_t start = 0, end = 0;
  for (const Elf64_Shdr& table : sections) {
    if (table.sh_type != SHT_SYMTAB || table.sh_link >= sections.size()) continue;
    const Elf64_Shdr& names = sections[table.sh_link];
    std::string strings(names.sh_size, '\0');
    std::vector<Elf64_Sym> symbols(table.sh_size / sizeof(Elf64_Sym));
    if (!read(names.sh_offset, strings.data(), strings.size()) ||
        !read(table.sh_offset, symbols.data(), symbols.size() * sizeof(Elf64_Sym))) {
      return 0;
    }
    for (const Elf64_Sym& symbol : symbols) {
      if (symbol.st_name >= strings.size()) continue;
      const char* name = strings.c_str() + symbol.st_name;
      if (std::strcmp(name, "_binary_constants_bin_start") == 0) start = symbol.st_value;
      if (std::strcmp(name, "_binary_constants_bin_end") == 0) end = symbol.st_value;
    }
  }
  return start && end > start ? end - start : 0;
}

size_t spec_leaves(const std::string& spec, const std::string& path) {
  const nlohmann::json parsed = nlohmann::json::parse(spec, nullptr, false);
  if (!parsed.is_array() || parsed.size() != 2) {
    throw std::runtime_error(path + ": its call spec is not torch.export's");
  }
  return count_leaves(parsed[1]);
}

}  // namespace

struct AotiPackage::Impl {
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  // With concurrency > 1: a container of that many models on the loader's library (the loader
  // keeps its extracted files and the metadata).
  std::unique_ptr<torch::inductor::AOTIModelContainerRunnerCpu> runner;
  size_t concurrency = 1;
  std::map<std::string, std::string> metadata;
  size_t inputs = 0, outputs = 0;
  uint64_t weight_bytes = 0;
  // The model container's first run() folds its constants under a unique lock of a mutex every
  // run() holds shared while it waits for a free model: two threads making their first run() at
  // once deadlock (LibTorch 2.6, a container of one model; seen with two workers). The first
  // run() that succeeds is made alone.
  std::mutex first_run;
  std::atomic<bool> folded{false};
};

AotiPackage::AotiPackage(const std::string& path, size_t concurrency)
    : impl_(std::make_unique<Impl>()) {
  const std::set<std::string> models_before = loaded_model_libraries();
  try {
    impl_->loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(path);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": not an AOTInductor package (.pt2) LibTorch " TORCH_VERSION
                             " loads (" + e.what_without_backtrace() + ")");
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not an AOTInductor package (.pt2) LibTorch " TORCH_VERSION
                             " loads (" + e.what() + ")");
  }
  // The library this loader extracted and loaded: the one new model library (none found, or two
  // packages loading at once: unknown).
  std::vector<std::string> added;
  for (const std::string& library : loaded_model_libraries()) {
    if (!models_before.count(library)) added.push_back(library);
  }
  if (added.size() == 1) impl_->weight_bytes = constants_bytes(added[0]);
  for (const auto& [key, value] : impl_->loader->get_metadata()) impl_->metadata[key] = value;
  if (concurrency > 1 && added.size() == 1 && metadata("AOTI_DEVICE_KEY") == "cpu") {
    try {
      impl_->runner =
          std::make_unique<torch::inductor::AOTIModelContainerRunnerCpu>(added[0], concurrency);
      impl_->concurrency = concurrency;
    } catch (const std::exception&) {
      impl_->runner.reset();  // the loader's container of one serves
    }
  }
  const std::vector<std::string> spec = impl_->loader->get_call_spec();
  if (spec.size() != 2) {
    throw std::runtime_error(path + ": its call spec is not torch.export's");
  }
  impl_->inputs = spec_leaves(spec[0], path);
  impl_->outputs = spec_leaves(spec[1], path);
}

c10::IValue AotiPackage::run(const std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(inputs.size());
  for (const c10::IValue& v : inputs) {
    if (!v.isTensor()) {
      throw std::invalid_argument("an AOTInductor package takes tensors only, not " + v.tagKind());
    }
    tensors.push_back(v.toTensor());
  }
  auto run = [&] {
    return impl_->runner ? impl_->runner->run(tensors) : impl_->loader->run(tensors);
  };
  if (!impl_->folded.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(impl_->first_run);
    if (!impl_->folded.load(std::memory_order_relaxed)) {
      c10::List<at::Tensor> out(run());
      impl_->folded.store(true, std::memory_order_release);
      return out;
    }
  }
  return c10::List<at::Tensor>(run());
}

#else

bool aoti_supported() { return false; }

std::string aoti_package_unsupported(const std::string& path) {
  return path + ": an AOTInductor package (.pt2) needs PyTorch >= 2.6, and this memoplan is built "
         "with LibTorch " TORCH_VERSION " (Debian 13's is 2.6: scripts/debian13.sh); a TorchScript "
         "file (torch.jit.trace or torch.jit.script, then .save) runs here";
}

struct AotiPackage::Impl {
  std::map<std::string, std::string> metadata;
  size_t inputs = 0, outputs = 0;
  uint64_t weight_bytes = 0;
  size_t concurrency = 1;
};

AotiPackage::AotiPackage(const std::string& path, size_t) {
  throw std::runtime_error(aoti_package_unsupported(path));
}

c10::IValue AotiPackage::run(const std::vector<c10::IValue>&) {
  throw std::logic_error("unreachable: no AotiPackage is made in this build");
}

#endif

AotiPackage::~AotiPackage() = default;

const std::map<std::string, std::string>& AotiPackage::metadata() const { return impl_->metadata; }
std::string AotiPackage::metadata(const std::string& key) const {
  const auto it = impl_->metadata.find(key);
  return it == impl_->metadata.end() ? "" : it->second;
}
size_t AotiPackage::input_count() const { return impl_->inputs; }
size_t AotiPackage::output_count() const { return impl_->outputs; }
uint64_t AotiPackage::weight_bytes() const { return impl_->weight_bytes; }
size_t AotiPackage::concurrency() const { return impl_->concurrency; }

}  // namespace memoplan::torch_ext

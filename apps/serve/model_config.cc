#include "model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "memoplan/torch/budget.h"  // parse_budget
#include "memoplan/torch/plan.h"    // parse_kernels, parse_memory

namespace memoplan::serve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::invalid_argument bad(const std::string& key, const std::string& why) {
  return std::invalid_argument("config.json: \"" + key + "\" " + why);
}

int64_t integer(const json& value, const std::string& key, int64_t lo, int64_t hi) {
  if (!value.is_number_integer()) throw bad(key, "must be an integer");
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) {
    throw bad(key, "must be from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

std::vector<int64_t> dims_of(const json& value, const std::string& key, int64_t lowest) {
  if (!value.is_array() || value.empty()) throw bad(key, "must be a non-empty array of integers");
  std::vector<int64_t> dims;
  for (const json& d : value) dims.push_back(integer(d, key, lowest, INT32_MAX));
  return dims;
}

}  // namespace

void check_budget(const ModelConfig& config) {
  if (!config.budget.empty() && config.kernels == "tuned") {
    throw std::invalid_argument(
        "a budget needs kernels \"stock\" or \"auto\" (the tuned kernels keep packed copies of "
        "the weights resident)");
  }
}

void apply_config_json(const std::string& text, ModelConfig& config) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(std::string("config.json: malformed JSON: ") + e.what());
  }
  if (!doc.is_object()) throw std::invalid_argument("config.json: must be a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (key == "workers") {
      config.workers = static_cast<int>(integer(value, key, 1, 1024));
    } else if (key == "queue") {
      config.queue = static_cast<size_t>(integer(value, key, 0, 1 << 20));
    } else if (key == "strategy") {
      if (!value.is_string()) throw bad(key, "must be a string");
      config.strategy = value.get<std::string>();
    } else if (key == "plan") {
      if (!value.is_boolean()) throw bad(key, "must be true or false");
      config.plan = value.get<bool>();
    } else if (key == "kernels") {
      if (!value.is_string() || (value.get<std::string>() != "auto" &&
                                 !torch_ext::parse_kernels(value.get<std::string>()))) {
        throw bad(key, "must be \"auto\", \"stock\" or \"tuned\"");
      }
      config.kernels = value.get<std::string>();
    } else if (key == "memory") {
      if (!value.is_string() || !torch_ext::parse_memory(value.get<std::string>())) {
        throw bad(key, "must be \"offset\" or \"min\"");
      }
      config.memory = value.get<std::string>();
    } else if (key == "budget") {
      if (!value.is_string() || !torch_ext::parse_budget(value.get<std::string>())) {
        throw bad(key, "must be a size (\"64MiB\", \"1.5GiB\") or a share (\"25%\")");
      }
      config.budget = value.get<std::string>();
    } else if (key == "memory_limit") {
      config.memory_limit = static_cast<uint64_t>(integer(value, key, 0, INT64_MAX));
    } else if (key == "max_batch_size") {
      config.batching.max_batch_size = static_cast<int>(integer(value, key, 0, 4096));
    } else if (key == "preferred_batch_size") {
      if (!value.is_array()) throw bad(key, "must be an array of integers");
      config.batching.preferred_batch_sizes.clear();
      for (const json& b : value) {
        config.batching.preferred_batch_sizes.push_back(static_cast<int>(integer(b, key, 1, 4096)));
      }
    } else if (key == "max_queue_delay_us") {
      config.batching.max_queue_delay =
          std::chrono::microseconds(integer(value, key, 0, 10'000'000));
    } else if (key == "inputs") {
      if (!value.is_array()) throw bad(key, "must be an array of objects");
      config.inputs.clear();
      config.max_dims.clear();
      for (const json& in : value) {
        if (!in.is_object()) throw bad(key, "must be an array of objects");
        InputDefault input;
        std::vector<int64_t> max_dims;
        bool has_dims = false;
        for (const auto& [field, v] : in.items()) {
          const std::string where =
              "inputs[" + std::to_string(config.max_dims.size()) + "]." + field;
          if (field == "name") {
            if (!v.is_string()) throw bad(where, "must be a string");
          } else if (field == "dims") {
            input.shape = dims_of(v, where, 0);
            has_dims = true;
          } else if (field == "datatype") {
            const std::optional<DataType> type =
                v.is_string() ? parse_datatype(v.get<std::string>()) : std::nullopt;
            if (!type) throw bad(where, "must be a datatype the server takes (FP32, INT64, ...)");
            input.datatype = *type;
          } else if (field == "max_dims") {
            max_dims = dims_of(v, where, -1);
          } else {
            throw bad(where, "is not a key an input takes (name, dims, datatype, max_dims)");
          }
        }
        if (!has_dims) {
          throw bad("inputs[" + std::to_string(config.max_dims.size()) + "].dims", "is missing");
        }
        if (!max_dims.empty() && max_dims.size() != input.shape.size()) {
          throw bad("inputs[" + std::to_string(config.max_dims.size()) + "].max_dims",
                    "must have as many dimensions as dims");
        }
        config.inputs.push_back(std::move(input));
        config.max_dims.push_back(std::move(max_dims));
      }
    } else {
      throw bad(key,
                "is not a key memoplan-serve takes (workers, queue, strategy, plan, kernels, "
                "memory, budget, memory_limit, max_batch_size, preferred_batch_size, "
                "max_queue_delay_us, inputs)");
    }
  }
  check_budget(config);
}

std::vector<RepositoryEntry> scan_repository(const std::string& dir, const ModelConfig& defaults) {
  std::vector<RepositoryEntry> entries;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::invalid_argument("model repository " + dir + ": " + ec.message());
  for (const fs::directory_entry& e : it) {
    RepositoryEntry entry;
    entry.config = defaults;
    const fs::path p = e.path();
    // .pt2 files are AOTInductor packages (LibTorch >= 2.6; elsewhere the load says why not).
    if (e.is_regular_file() && (p.extension() == ".pt" || p.extension() == ".pt2")) {
      entry.config.name = p.stem().string();
      entry.config.path = p.string();
    } else if (e.is_directory()) {
      entry.config.name = p.filename().string();
      for (const fs::path& candidate :
           {p / "1" / "model.pt", p / "model.pt", p / "1" / "model.pt2", p / "model.pt2"}) {
        if (fs::is_regular_file(candidate)) {
          entry.config.path = candidate.string();
          break;
        }
      }
      if (entry.config.path.empty()) {
        entry.error = "no model file (" + (p / "1" / "model.pt").string() + ", " +
                      (p / "model.pt").string() + " or their .pt2)";
      }
      const fs::path config = p / "config.json";
      if (fs::is_regular_file(config)) {
        std::ifstream in(config);
        std::stringstream text;
        text << in.rdbuf();
        try {
          apply_config_json(text.str(), entry.config);
        } catch (const std::invalid_argument& bad_config) {
          entry.error = config.string() + ": " + bad_config.what();
        }
      }
    } else {
      continue;
    }
    if (entry.config.name.empty() || entry.config.name[0] == '.') continue;
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(), [](const RepositoryEntry& a, const RepositoryEntry& b) {
    return a.config.name < b.config.name;
  });
  return entries;
}

}  // namespace memoplan::serve

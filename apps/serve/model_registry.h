// The models a server serves: one TorchScript file given on the command line, or every model of a
// repository (--model-repository DIR, model_config.h), each with its own workers, queue, batcher,
// readiness and metrics. The routes of both protocols find a model here by name; the repository
// endpoints load and unload models while the others serve (a request in flight keeps its model
// alive until it is answered). Torch-free: the model is reached through model.h.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batcher.h"
#include "infer_handler.h"
#include "load_thread.h"
#include "metrics.h"
#include "model.h"
#include "model_config.h"
#include "worker_pool.h"

namespace memoplan::serve {

// One served model. Loads its file and starts its workers in the constructor (throws
// std::runtime_error when the file cannot be loaded), plans its default input in prepare(); the
// registry makes it ready once its memory passes the limits.
class ServedModel {
 public:
  ServedModel(const ModelConfig& config, Metrics& server_metrics);
  ~ServedModel();  // stops the batcher, answers what is queued, joins the workers

  // Plans the default input, on one of the model's workers (its slab is then a worker's, as it
  // would be at the first request). Returns a line for the log. Throws.
  std::string prepare();
  void set_ready() { ready_.store(true, std::memory_order_release); }

  const ModelConfig& config() const { return config_; }
  const std::string& name() const { return config_.name; }
  Model& model() { return *model_; }
  InferHandler& handler() { return *handler_; }
  Metrics& metrics() { return metrics_; }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  Gauges gauges() const;
  ModelMemory memory() const { return model_->memory(); }
  // What the memory limits charge it (ModelMemory::charged with its workers).
  uint64_t charged_bytes() const { return memory().charged(config_.workers); }

 private:
  ModelConfig config_;
  Metrics metrics_;  // this model's; every count also goes to the server's
  std::unique_ptr<Model> model_;
  std::unique_ptr<WorkerPool> pool_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<InferHandler> handler_;
  std::unique_ptr<Batcher> batcher_;
};

class ModelRegistry {
 public:
  // `repository`: the directory --model-repository names (empty: no repository, the models are
  // add()ed); `defaults`: the command line's settings, which a model's config.json overrides;
  // `memory_limit`: bytes all models together may be charged (--memory-limit; 0: no limit).
  ModelRegistry(Metrics& server_metrics, std::string repository, ModelConfig defaults,
                uint64_t memory_limit = 0);
  ~ModelRegistry();

  // Loads one model and lists it, not ready until prepare() (the single-file mode loads before it
  // listens and plans after). Throws std::runtime_error, also when its file alone is more than
  // the memory limits leave.
  std::shared_ptr<ServedModel> add(const ModelConfig& config);
  // Plans a model add() listed and makes it ready; throws std::runtime_error (the model is then
  // not ready, and unlisted by the caller) when planning fails or its memory would pass its
  // memory_limit or the server's. Returns a line for the log.
  std::string prepare(ServedModel& model);
  uint64_t memory_limit() const { return memory_limit_; }
  // Repository mode: loads every model of the repository; one that fails is listed
  // UNAVAILABLE with its reason (and logged through `log`), the others serve.
  void load_all(const std::function<void(const std::string&)>& log);

  // The model called `name`, or null.
  std::shared_ptr<ServedModel> find(const std::string& name) const;
  // The model a request names (and its version, when given), or HttpError 404 naming the models
  // served: what every route and gRPC call starts with.
  std::shared_ptr<ServedModel> get(const std::string& name, const std::string& version) const;
  std::vector<std::shared_ptr<ServedModel>> models() const;  // loaded ones, by name
  bool all_ready() const;  // every loaded model planned (and at least one loaded)
  bool has_repository() const { return !repository_.empty(); }

  // The repository extension: every model of the repository (and any loaded model) with its
  // state ("READY", "LOADING", "UNAVAILABLE") and, when not ready, why.
  struct IndexEntry {
    std::string name, version = "1", state, reason;
  };
  std::vector<IndexEntry> index() const;
  // Loads (or reloads) `name` from the repository: throws HttpError 400 without a repository,
  // 404 for a name the repository does not have, 400 with the reason when it fails to load.
  void load(const std::string& name);
  // Unloads `name`: throws HttpError 404 when it is not loaded. Requests in flight finish.
  void unload(const std::string& name);

  // Every model's workers stop (after answering what is queued).
  void stop_all();

 private:
  Metrics& server_metrics_;
  const std::string repository_;
  const ModelConfig defaults_;
  const uint64_t memory_limit_;
  // Throws when `bytes` charged to `config`'s model pass its memory_limit or, with every loaded
  // model but `config.name`'s, the server's. `what`: "its file" or "it".
  void check_memory(const ModelConfig& config, uint64_t bytes, const char* what) const;
  // check_memory with the model file's size, before it is loaded.
  void check_file_memory(const ModelConfig& config) const;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<ServedModel>> loaded_;
  std::map<std::string, std::string> unavailable_;  // name -> why
  std::map<std::string, int> loading_;              // loads under way, by name
  // Loads, plans and frees the repository's models, one at a time (load_thread.h says why).
  LoadThread loader_;
};

}  // namespace memoplan::serve

#include "model_registry.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>
#include <stdexcept>

#include "http_error.h"

namespace memoplan::serve {

ServedModel::ServedModel(const ModelConfig& config, Metrics& server_metrics)
    : config_(config), metrics_(&server_metrics) {
  ModelOptions options;
  options.path = config.path;
  options.name = config.name;
  options.inputs = config.inputs;
  options.strategy = config.strategy;
  options.plan = config.plan;
  options.kernels = config.kernels;
  options.memory = config.memory;
  options.budget = config.budget;
  options.workers = config.workers;
  model_ = std::make_unique<Model>(options);
  if (config.batching.max_batch_size > 1) {
    for (const TensorSpec& in : model_->spec().inputs) {
      if (!in.unchecked && !in.shape.empty() && in.shape[0] != -1) {
        throw std::runtime_error(
            config.path + ": input '" + in.name + "' has a fixed batch of " +
            std::to_string(in.shape[0]) +
            " (an AOTInductor package runs the shapes it was exported for): dynamic batching "
            "(max_batch_size " + std::to_string(config.batching.max_batch_size) +
            ") needs a model that takes any batch");
      }
    }
  }
  // The workers exist (and have set their intra-op threads) before the model is planned.
  pool_ = std::make_unique<WorkerPool>(config.workers, config.queue,
                                       [](int) { Model::init_worker_thread(); });
  handler_ = std::make_unique<InferHandler>(*model_, *pool_, metrics_, ready_);
  handler_->set_max_dims(config.max_dims);
  if (config.batching.max_batch_size > 1) {
    BatchingOptions batching = config.batching;
    batching.max_pending = config.queue;
    Model& model = *model_;
    Metrics& metrics = metrics_;
    batcher_ = std::make_unique<Batcher>(
        batching, *pool_, metrics_, [&model, &metrics](const std::vector<HostTensor>& in) {
          const auto begin = std::chrono::steady_clock::now();
          bool ok = false;
          struct Count {  // counted whether forward returns or throws
            Metrics& metrics;
            std::chrono::steady_clock::time_point begin;
            const bool& ok;
            ~Count() {
              metrics.count_inference(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(),
                  ok);
            }
          } count{metrics, begin, ok};
          std::vector<HostTensor> out = model.infer(in);
          ok = true;
          return out;
        });
    handler_->set_batcher(batcher_.get());
  }
}

ServedModel::~ServedModel() {
  if (batcher_) batcher_->stop();
  pool_->stop();
}

std::string ServedModel::prepare() {
  auto done = std::make_shared<std::promise<std::string>>();
  std::future<std::string> line_of = done->get_future();
  Model& model = *model_;
  WorkerPool::Job job;
  job.run = [&model, done] {
    try {
      done->set_value(model.prepare());
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  };
  job.finish = [] {};
  // The workers are idle (nothing is routed to a model before it is ready): the job is taken.
  if (!pool_->try_submit(std::move(job))) throw std::runtime_error("the workers are stopping");
  std::string line = line_of.get();
  if (batcher_) {
    line += "; dynamic batching up to " + std::to_string(config_.batching.max_batch_size) +
            " rows, queue delay " + std::to_string(config_.batching.max_queue_delay.count()) +
            " us";
  }
  return line;
}

Gauges ServedModel::gauges() const {
  Gauges g;
  g.queue_depth = pool_->depth() + (batcher_ ? batcher_->pending() : 0);
  g.queue_capacity = pool_->capacity();
  g.workers = pool_->workers();
  g.busy_workers = pool_->busy();
  g.ready = ready();
  const ModelMemory m = memory();
  g.weights_plain_bytes = m.weights_plain;
  g.weights_packed_bytes = m.weights_packed;
  g.slab_bytes = m.slabs;
  g.charged_bytes = m.charged(config_.workers);
  g.memory_limit_bytes = config_.memory_limit;
  return g;
}

ModelRegistry::ModelRegistry(Metrics& server_metrics, std::string repository, ModelConfig defaults,
                             uint64_t memory_limit)
    : server_metrics_(server_metrics),
      repository_(std::move(repository)),
      defaults_(std::move(defaults)),
      memory_limit_(memory_limit) {}

namespace {

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

void ModelRegistry::check_memory(const ModelConfig& config, uint64_t bytes,
                                  const char* what) const {
  if (config.memory_limit > 0 && bytes > config.memory_limit) {
    throw std::runtime_error(std::string(what) + " would hold " + mib(bytes) +
                             ", over its memory_limit of " + mib(config.memory_limit));
  }
  if (memory_limit_ == 0) return;
  uint64_t others = 0;
  for (const auto& model : models()) {
    if (model->name() != config.name) others += model->charged_bytes();
  }
  if (others + bytes > memory_limit_) {
    throw std::runtime_error(std::string(what) + " would hold " + mib(bytes) + " beside the " +
                             mib(others) + " the other models hold: over --memory-limit " +
                             mib(memory_limit_) + " (no model was unloaded)");
  }
}

void ModelRegistry::check_file_memory(const ModelConfig& config) const {
  std::error_code ec;
  const uintmax_t file_bytes = std::filesystem::file_size(config.path, ec);
  if (!ec) check_memory(config, file_bytes, "its file");  // an unreadable file fails its load
}

std::string ModelRegistry::prepare(ServedModel& model) {
  std::string line = model.prepare();
  const ModelMemory m = model.memory();
  const uint64_t charged = m.charged(model.config().workers);
  check_memory(model.config(), charged, "it");
  model.set_ready();
  return line + "; memory " + mib(charged) + " (weights " + mib(m.weights_plain) + " plain, " +
         mib(m.weights_packed) + " packed; slabs " + std::to_string(model.config().workers) +
         " x " + mib(m.slab_per_worker) + ")";
}

ModelRegistry::~ModelRegistry() { stop_all(); }

std::shared_ptr<ServedModel> ModelRegistry::add(const ModelConfig& config) {
  check_file_memory(config);
  auto model = std::make_shared<ServedModel>(config, server_metrics_);
  std::lock_guard<std::mutex> lock(mutex_);
  loaded_[config.name] = model;  // listed, not ready, until it is planned
  unavailable_.erase(config.name);
  return model;
}

void ModelRegistry::load_all(const std::function<void(const std::string&)>& log) {
  // On the loader thread, as later loads and unloads: they reuse what these leave free.
  if (!loader_.on_thread()) return loader_.run([&] { load_all(log); });
  // Every model is listed (loaded, not ready) before the first is planned: all_ready() must not
  // say yes while a model further down the repository has yet to be added.
  std::vector<std::shared_ptr<ServedModel>> added;
  std::vector<const RepositoryEntry*> sources;
  const std::vector<RepositoryEntry> entries = scan_repository(repository_, defaults_);
  for (const RepositoryEntry& entry : entries) {
    try {
      if (!entry.error.empty()) throw std::runtime_error(entry.error);
      added.push_back(add(entry.config));
      sources.push_back(&entry);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      unavailable_[entry.config.name] = e.what();
      log("model '" + entry.config.name + "' not loaded: " + e.what());
    }
  }
  for (size_t i = 0; i < added.size(); ++i) {
    const ModelConfig& config = sources[i]->config;
    try {
      log("model '" + config.name + "' (" + config.path + "): " + prepare(*added[i]));
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      loaded_.erase(config.name);
      unavailable_[config.name] = e.what();
      log("model '" + config.name + "' not loaded: " + e.what());
    }
  }
}

std::shared_ptr<ServedModel> ModelRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = loaded_.find(name);
  return it == loaded_.end() ? nullptr : it->second;
}

std::shared_ptr<ServedModel> ModelRegistry::get(const std::string& name,
                                                const std::string& version) const {
  std::shared_ptr<ServedModel> model = find(name);
  if (!model) {
    std::string names;
    for (const auto& m : models()) names += (names.empty() ? "'" : ", '") + m->name() + "'";
    throw HttpError(404, "unknown model '" + name + "' (this server serves " +
                             (names.empty() ? std::string("none") : names) + ")");
  }
  const std::string served_version = model->model().spec().version;
  if (!version.empty() && version != served_version) {
    throw HttpError(
        404, "model '" + name + "' has no version '" + version + "' (only " + served_version + ")");
  }
  return model;
}

std::vector<std::shared_ptr<ServedModel>> ModelRegistry::models() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<ServedModel>> out;
  for (const auto& [name, model] : loaded_) out.push_back(model);
  return out;
}

bool ModelRegistry::all_ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (loaded_.empty()) return false;
  return std::all_of(loaded_.begin(), loaded_.end(),
                     [](const auto& entry) { return entry.second->ready(); });
}

std::vector<ModelRegistry::IndexEntry> ModelRegistry::index() const {
  std::vector<RepositoryEntry> entries;
  if (!repository_.empty()) {
    try {
      entries = scan_repository(repository_, defaults_);
    } catch (const std::invalid_argument&) {
      // The directory went away: the loaded models are still listed.
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, IndexEntry> listed;
  for (const RepositoryEntry& e : entries) {
    IndexEntry& i = listed[e.config.name];
    i.name = e.config.name;
    i.state = "UNAVAILABLE";
    i.reason = e.error.empty() ? "unloaded" : e.error;
  }
  for (const auto& [name, why] : unavailable_) {
    IndexEntry& i = listed[name];
    i.name = name;
    i.state = "UNAVAILABLE";
    i.reason = why;
  }
  for (const auto& [name, model] : loaded_) {
    IndexEntry& i = listed[name];
    i.name = name;
    i.state = model->ready() ? "READY" : "LOADING";
    i.reason.clear();
  }
  for (const auto& [name, count] : loading_) {
    if (count > 0 && !loaded_.count(name)) {
      IndexEntry& i = listed[name];
      i.name = name;
      i.state = "LOADING";
      i.reason.clear();
    }
  }
  std::vector<IndexEntry> out;
  for (auto& [name, entry] : listed) out.push_back(std::move(entry));
  return out;
}

void ModelRegistry::load(const std::string& name) {
  if (repository_.empty()) {
    throw HttpError(400, "this server has no model repository (--model-repository DIR)");
  }
  std::vector<RepositoryEntry> entries;
  try {
    entries = scan_repository(repository_, defaults_);
  } catch (const std::invalid_argument& e) {
    throw HttpError(400, e.what());
  }
  const auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const RepositoryEntry& e) { return e.config.name == name; });
  if (it == entries.end()) {
    throw HttpError(404, "no model '" + name + "' in the repository " + repository_);
  }
  if (!it->error.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    unavailable_[name] = it->error;
    throw HttpError(400, "model '" + name + "' cannot load: " + it->error);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++loading_[name];
  }
  // Loaded and planned beside the old one, which serves until the new one replaces it.
  std::shared_ptr<ServedModel> model;
  std::string error;
  loader_.run([&] {
    try {
      check_file_memory(it->config);
      model = std::make_shared<ServedModel>(it->config, server_metrics_);
      prepare(*model);
    } catch (const std::exception& e) {
      error = e.what();
      model.reset();
    }
  });
  std::shared_ptr<ServedModel> replaced;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --loading_[name];
    if (!model) {
      if (!loaded_.count(name)) unavailable_[name] = error;
    } else {
      replaced = std::move(loaded_[name]);
      loaded_[name] = model;
      unavailable_.erase(name);
    }
  }
  // `replaced` goes once its last request in flight is answered; here, when none is.
  loader_.run([&] { replaced.reset(); });
  if (!model) throw HttpError(400, "model '" + name + "' failed to load: " + error);
}

void ModelRegistry::unload(const std::string& name) {
  std::shared_ptr<ServedModel> model;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = loaded_.find(name);
    if (it == loaded_.end()) throw HttpError(404, "model '" + name + "' is not loaded");
    model = std::move(it->second);
    loaded_.erase(it);
    unavailable_[name] = "unloaded";
  }
  // Its workers stop once the requests holding it are answered (the last reference): here, when
  // none is in flight.
  loader_.run([&] { model.reset(); });
}

void ModelRegistry::stop_all() {
  std::map<std::string, std::shared_ptr<ServedModel>> models;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    models.swap(loaded_);
  }
  models.clear();  // each stops its batcher and workers
}

}  // namespace memoplan::serve

// memoplan-serve: a KServe v2 / Triton HTTP inference server for one TorchScript model, planned
// with memoplan (each worker replays its own slab). No Python at run time. Usage: docs/SERVE.md.
#include <dlfcn.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "http_server.h"
#ifdef MEMOPLAN_SERVE_GRPC
#include "grpc_server.h"
#endif
#include "memoplan/planner/strategy.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/fuser.h"
#include "memoplan/torch/plan.h"
#include "model_config.h"
#include "model_registry.h"
#include "shutdown.h"

namespace {

constexpr const char* kVersion = "0.1.0";
constexpr int kExitFailure = 1;   // could not serve (port taken, socket failed)
constexpr int kExitBadInput = 2;  // bad options or model file, as the memoplan CLI

struct Options {
  std::string model_path;
  std::string repository;  // --model-repository: serve every model in it
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = -1;  // -1: no gRPC; 0: any free port (printed)
  int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string name;
  size_t queue = 32;
  memoplan::serve::HttpLimits limits;  // --max-body, --header-timeout, ... (docs/SERVE.md, Limits)
  int http_threads = 0;                // 0: max(64, workers + queue + 4)
  std::string strategy{memoplan::planner::kDefaultStrategy};
  bool no_plan = false;
  bool fuser = false;  // LibTorch's TensorExpr fuser (--fuser)
  std::string kernels = "auto";
  std::string memory = "offset";
  std::string budget;
  uint64_t memory_limit = 0;
  std::vector<std::string> inputs;
  int max_batch_size = 0;  // dynamic batching: 0 or 1 off
  std::vector<int> preferred_batch_sizes;
  int64_t max_queue_delay_us = 0;
};

void log(const std::string& line) { std::fprintf(stderr, "memoplan-serve: %s\n", line.c_str()); }

// Request bodies, their parse buffers and tensors are megabytes each, made on many HTTP threads,
// each with a malloc arena of its own that keeps what it freed (and glibc raises the mmap
// threshold as large blocks are freed): resnet18 JSON requests from 8 connections took VmRSS
// from 260 to 507 MB in 48 s. Served by mmap from 256 KiB on (a fixed threshold is never
// raised), freed memory goes back at once: 290-299 MB under the same load. A
// MALLOC_MMAP_THRESHOLD_ in the environment wins.
// Under tcmalloc (memoplan-serve is linked with it: the plan serves the tensors, tcmalloc the
// rest) the same holds: freed spans are decommitted at once instead of kept in its page heap
// (the 64-thread load test grew 47 MB without it). TCMALLOC_AGGRESSIVE_DECOMMIT in the
// environment wins.
void return_large_blocks_to_the_kernel() {
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 256 << 10);
  using SetProperty = int (*)(const char*, size_t);
  auto set =
      reinterpret_cast<SetProperty>(dlsym(RTLD_DEFAULT, "MallocExtension_SetNumericProperty"));
  if (set && !std::getenv("TCMALLOC_AGGRESSIVE_DECOMMIT")) {
    set("tcmalloc.aggressive_memory_decommit", 1);
  }
  // Its per-thread caches, over up to 64 HTTP threads: 8 MiB in all (tcmalloc's default is 32).
  if (set && !std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES")) {
    set("tcmalloc.max_total_thread_cache_bytes", size_t{8} << 20);
  }
}

int serve(const Options& o) {
  using namespace memoplan::serve;
  const auto started = std::chrono::steady_clock::now();
  return_large_blocks_to_the_kernel();
  install_shutdown_handlers();
  memoplan::torch_ext::set_fuser(o.fuser);  // off unless --fuser: memoplan/torch/fuser.h

  // The command line's settings: the one model's, or every repository model's defaults.
  ModelConfig defaults;
  defaults.workers = o.workers;
  defaults.queue = o.queue;
  defaults.strategy = o.strategy;
  defaults.plan = !o.no_plan;
  defaults.kernels = o.kernels;
  defaults.memory = o.memory;
  defaults.budget = o.budget;
  defaults.batching.max_batch_size = o.max_batch_size;
  defaults.batching.preferred_batch_sizes = o.preferred_batch_sizes;
  defaults.batching.max_queue_delay = std::chrono::microseconds(o.max_queue_delay_us);
  try {
    for (const std::string& text : o.inputs) defaults.inputs.push_back(parse_input_default(text));
    check_budget(defaults);
  } catch (const std::exception& e) {
    log(e.what());
    return kExitBadInput;
  }
  Metrics metrics;
  ModelRegistry models(metrics, o.repository, defaults, o.memory_limit);
  std::shared_ptr<ServedModel> single;
  if (o.repository.empty()) {
    ModelConfig config = defaults;
    config.path = o.model_path;
    config.name = o.name.empty() ? std::filesystem::path(o.model_path).stem().string() : o.name;
    try {
      single = models.add(config);  // loaded and its workers started; planned once listening
    } catch (const std::exception& e) {
      log(e.what());
      return kExitBadInput;
    }
    log("loaded " + o.model_path + " as model '" + config.name + "'");
  } else {
    try {
      scan_repository(o.repository, defaults);
    } catch (const std::exception& e) {
      log(e.what());
      return kExitBadInput;
    }
  }

  HttpOptions http;
  http.limits = o.limits;
  // Handler threads: one per infer or repository call in flight (open connections hold none).
  // Enough of them that clients meet the queue's 503 rather than wait for one.
  http.threads =
      o.http_threads > 0 ? o.http_threads : std::max(64, o.workers + static_cast<int>(o.queue) + 4);
  http.version = kVersion;
  http.plan_stats = &memoplan::torch_ext::plan_stats;
  HttpServer server(http, models, metrics);
  const int port = server.bind(o.host, o.port);
  if (port < 0) {
    log("cannot listen on " + o.host + ":" + std::to_string(o.port));
    return kExitFailure;
  }
  int grpc_port = -1;
#ifdef MEMOPLAN_SERVE_GRPC
  std::unique_ptr<GrpcServer> grpc;
  if (o.grpc_port >= 0) {
    GrpcOptions grpc_options;
    grpc_options.max_message = o.limits.max_body;
    grpc_options.threads = http.threads;
    grpc_options.header_timeout_s = o.limits.header_timeout_s;
    grpc_options.idle_timeout_s = o.limits.idle_timeout_s;
    grpc_options.max_header = o.limits.max_header;
    grpc_options.version = kVersion;
    grpc = std::make_unique<GrpcServer>(grpc_options, models, metrics);
    const int bound = grpc->start(o.host, o.grpc_port);
    if (bound < 0) {
      log("cannot listen for gRPC on " + o.host + ":" + std::to_string(o.grpc_port));
      return kExitFailure;
    }
    grpc_port = bound;
  }
#endif
  bool served = true;
  std::thread listener([&] { served = server.run(); });
  // stop() only acts on a running server: wait for it before the watcher may call it.
  while (!server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // stdout, flushed: scripts (the tests) read the port from this line when --port is 0.
  std::printf("memoplan-serve: listening on http://%s:%d\n", o.host.c_str(), port);
  if (grpc_port >= 0) {
    std::printf("memoplan-serve: listening for gRPC on %s:%d\n", o.host.c_str(), grpc_port);
  }
  std::fflush(stdout);

  ShutdownWatcher watcher([&server](int signal) {
    log(std::string("got ") + (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
        ": no new connections; finishing the requests in flight");
    server.stop();
  });
  int status = 0;
  try {
    if (single) {
      log(models.prepare(*single));
    } else {
      models.load_all(log);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const size_t loaded = models.models().size();
    log("ready after " + std::to_string(seconds).substr(0, 4) + " s: " + std::to_string(loaded) +
        " model(s), " + std::to_string(http.threads) + " HTTP handler threads, at most " +
        std::to_string(server.max_connections()) + " connections" +
        (single ? ", " + std::to_string(o.workers) + " worker(s), queue " + std::to_string(o.queue)
                : ""));
  } catch (const std::exception& e) {
    log(e.what());
    server.stop();
    status = kExitBadInput;
  }
  listener.join();
#ifdef MEMOPLAN_SERVE_GRPC
  if (grpc) grpc->stop();  // answers the calls in flight
#endif
  single.reset();
  models.stop_all();  // every queued request was answered before run() returned and stop()
  if (!served) {
    log("the listening socket failed");
    return kExitFailure;
  }
  log("stopped");
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "memoplan-serve: serves a TorchScript model over the KServe v2 HTTP protocol, its "
      "memory planned by memoplan (docs/SERVE.md)."};
  app.set_version_flag("--version", std::string("memoplan-serve ") + kVersion);
  CLI::Option* model =
      app.add_option("MODEL", o.model_path, "TorchScript file (.pt)")->check(CLI::ExistingFile);
  CLI::Option* repository =
      app.add_option("--model-repository", o.repository,
                     "serve every model of this directory: NAME/1/model.pt (Triton's layout), "
                     "NAME/model.pt or NAME.pt, each with an optional NAME/config.json "
                     "(docs/SERVE.md); instead of MODEL")
          ->check(CLI::ExistingDirectory);
  model->excludes(repository);
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "port; 0: any free one (printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--grpc-port", o.grpc_port,
                 "also serve the KServe v2 gRPC protocol on this port (Triton's is 8001); 0: any "
                 "free one (printed); default: no gRPC")
      ->check(CLI::Range(0, 65535));
  app.add_option("--max-batch-size", o.max_batch_size,
                 "dynamic batching: requests whose inputs differ only in dimension 0 are stacked "
                 "into forward calls of up to this many rows (0 or 1: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  app.add_option("--preferred-batch-size", o.preferred_batch_sizes,
                 "dynamic batching: a batch of this many rows goes to a worker at once "
                 "(repeatable)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-queue-delay-us", o.max_queue_delay_us,
                 "dynamic batching: how long a request may wait for others to join its batch "
                 "while a worker is idle")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  app.add_option("--workers", o.workers,
                 "inference threads, one intra-op thread each (default: the CPUs)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--name", o.name, "model name in URLs (default: the file's stem)");
  app.add_option("--queue", o.queue, "requests that may wait for a worker; more get 503")
      ->capture_default_str();
  app.add_option("--max-body", o.limits.max_body,
                 "largest request body in bytes; larger get 413 (also gRPC's message limit)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-buffered", o.limits.max_buffered,
                 "bytes of request bodies held at once, being received or handled (512M, 2G); a "
                 "request past it gets 503 (default: 8 x --max-body)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--max-header", o.limits.max_header,
                 "largest request header (request line and fields) in bytes; larger get 431")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20));
  app.add_option("--header-timeout", o.limits.header_timeout_s,
                 "seconds a request header may take, from the connection's accept or from the "
                 "first byte after a keep-alive wait; slower ones are closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--idle-timeout", o.limits.idle_timeout_s,
                 "seconds a keep-alive connection may wait for its next request")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--min-rate", o.limits.min_rate,
                 "bytes per second a request body must arrive at, and a response be read at, "
                 "after the first --header-timeout seconds; slower clients are closed (0: none)")
      ->capture_default_str();
  app.add_option("--max-connections", o.limits.max_connections,
                 "HTTP connections open at once (lowered to fit the open-file limit); at the cap "
                 "the oldest idle one, else the oldest without a whole request, makes room")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  app.add_option("--max-connections-per-address", o.limits.max_connections_per_address,
                 "HTTP connections from one client address; more are refused (default: half of "
                 "--max-connections)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  app.add_option("--http-threads", o.http_threads,
                 "handler threads: each runs one infer or repository call at a time; open "
                 "connections hold none (default: max(64, workers + queue + 4))")
      ->check(CLI::Range(1, 4096));
  app.add_option("--strategy", o.strategy, "memoplan planning strategy (memoplan plan --list)")
      ->capture_default_str()
      ->check([](const std::string& s) {
        return memoplan::planner::find_strategy(s)
                   ? std::string()
                   : "unknown strategy; one of " + memoplan::planner::strategy_names();
      });
  app.add_flag("--fuser", o.fuser,
               "run LibTorch's TensorExpr fuser (LibTorch 2.x's default; off here: planned "
               "models cannot fuse, and 2.6 compiles some traced graphs for minutes)");
  app.add_flag("--no-plan", o.no_plan,
               "serve without memoplan's plan (LibTorch's allocator, or whatever LD_PRELOAD "
               "gives): the baseline to compare against");
  app.add_option("--kernels", o.kernels,
                 "tuned: memoplan's kernels and oneDNN where each shape measured faster, the "
                 "weights held once (docs/KERNELS.md); stock: aten's ops; auto: tuned, stock under "
                 "--budget or where the tuned plan fails (said in the log and the metadata)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "stock", "tuned"}));
  app.add_option("--memory", o.memory,
                 "offset: every planned tensor its own bytes; min: tensors share bytes and "
                 "convolutions run in parts where that shrinks the slab (docs/TORCH_EXT.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"offset", "min"}));
  app.add_option("--budget", o.budget,
                 "a memory budget for each model's weights + activations: 64MiB, 1.5GiB, or 25% "
                 "(of its weights plus its slab); weights stream from a file (docs/BUDGET.md); "
                 "not with --kernels tuned")
      ->check([](const std::string& s) {
        return memoplan::torch_ext::parse_budget(s) ? std::string()
                                                    : "a size (64MiB, 1.5GiB) or a share (25%)";
      });
  app.add_option("--memory-limit", o.memory_limit,
                 "bytes all models together may hold (weights plain and packed, a slab per "
                 "worker; e.g. 2G): a load that would pass it is refused (docs/SERVE.md)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--input", o.inputs,
                 "default input per forward tensor argument, SHAPE[:DATATYPE] (e.g. 1x3x224x224, "
                 "1x128:INT64), planned before ready; default: the file's extra files "
                 "input_shape and input_dtype");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }
  if (o.model_path.empty() && o.repository.empty()) {
    std::fprintf(stderr,
                 "memoplan-serve: a MODEL file or --model-repository DIR is required\n"
                 "Run with --help for more information.\n");
    return kExitBadInput;
  }
  return serve(o);
}

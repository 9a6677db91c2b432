// memoplan-run, which `memoplan run` executes: runs a TorchScript model (or an AOTInductor
// package) unplanned and planned, interleaved in one process, and reports latency, slab size,
// allocator traffic and whether the outputs are bit-identical (docs/RUN.md). Exit codes: 0 fine, 1
// the outputs differ or the run failed, 2 bad input or usage.
#include <fmt/core.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <map>

#include "memoplan/torch/aoti_package.h"
#include "memoplan/torch/budget.h"  // parse_budget

#include "input_spec.h"
#include "memoplan/planner/planner.h"
#include "report.h"
#include "rss_probe.h"
#include "run_options.h"
#include "session.h"

namespace {

using memoplan::torch_ext::Kernels;
using memoplan::torch_ext::Memory;

constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;
constexpr const char* kDefaultModel = "resnet18.pt";
constexpr const char* kMakeDefault = "/usr/bin/python3 bench/models/make_zoo.py --only resnet18";

int fail(int code, const std::string& message) {
  fmt::print(stderr, "memoplan run: error: {}\n", message);
  return code;
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// The default model: $MEMOPLAN_MODELS/resnet18.pt when that is set, else models/resnet18.pt in
// the working directory, else in the source tree this was built from. "" (and where it looked)
// when none is there.
std::string default_model(std::string& looked) {
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("MEMOPLAN_MODELS"); dir && *dir) {
    candidates.push_back(std::string(dir) + "/" + kDefaultModel);
  } else {
    candidates.push_back(std::string("models/") + kDefaultModel);
    candidates.push_back(std::string(MEMOPLAN_SOURCE_DIR) + "/models/" + kDefaultModel);
  }
  for (const std::string& c : candidates) {
    if (exists(c)) return c;
    looked += (looked.empty() ? "" : ", ") + c;
  }
  return "";
}

bool known_strategy(const std::string& name) {
  for (const memoplan::planner::StrategyInfo& s : memoplan::planner::all_strategies()) {
    if (s.name == name) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "memoplan run: loads a TorchScript model (or an AOTInductor package, .pt2, on LibTorch >= "
      "2.6) twice, plans one copy with memoplan, runs both "
      "interleaved and reports latency (median, p99), slab vs lower bound, tensor mallocs per "
      "pass, fallbacks, planning time and whether the outputs are bit-identical.",
      "memoplan run"};
  memoplan::run::RunOptions options;
  bool quiet = false;
  app.add_option("MODEL", options.model,
                 "TorchScript file, or AOTInductor package (.pt2; LibTorch >= 2.6) (default: "
                 "models/resnet18.pt; make it with " +
                     std::string(kMakeDefault) + ")");
  app.add_option(
      "--input", options.input,
      "Input shape, e.g. 1x3x224x224 (default: the one the file carries); a dim may be a "
      "range LO:HI, e.g. 1x8:256: each pass draws it uniformly (--seed)");
  app.add_option("--seed", options.seed,
                 "Seed of the shapes drawn from --input ranges (the same draws for both copies)");
  app.add_option("--draw", options.draw,
                 "How --input ranges are drawn: uniform (default), or lognormal (most passes "
                 "short, a long tail: the median at the range's geometric middle)")
      ->check(CLI::IsMember({"uniform", "lognormal"}));
  app.add_option("--dtype", options.dtype, "Input dtype (default: the file's, else float32)");
  app.add_option("-t,--threads", options.threads, "Inference threads")->check(CLI::Range(1, 256));
  app.add_option("--intra-op", options.intra_op,
                 "Intra-op threads of each inference thread (aten's, OpenBLAS's and oneDNN's; "
                 "default 1). The plan serves the inference threads' own allocations")
      ->check(CLI::Range(1, 256));
  app.add_flag(
      "--fuser", options.fuser,
      "Run LibTorch's TensorExpr fuser (on by default in LibTorch 2.x where it can fuse on "
      "the CPU) in every copy; off by default: the planned copies cannot fuse");
  app.add_option("-n,--iters", options.iters,
                 "Timed iterations, each one unplanned and one planned pass")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", options.warmup, "Untimed iterations per thread first")
      ->check(CLI::Range(0, 100000));
  app.add_option("--warm-passes", options.warm_passes,
                 "Untimed passes of each copy right before each block of its timed ones (default "
                 "0: the copies alternate and evict each other's weights from the caches)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--block", options.block,
                 "Timed passes of one copy in a row before the next copy runs the same inputs "
                 "(default 1: pass by pass). A small model stays slow for several passes after "
                 "another copy's, warm pass or not: --block 20 --warm-passes 3 times each copy as "
                 "a server running only that model does (the stock copy's B outputs are held "
                 "for the comparison)")
      ->check(CLI::Range(1, 10000));
  app.add_option("-s,--strategy", options.strategy, "Planner strategy (memoplan plan --list)");
  app.add_option("--heapmap", options.heapmap, "Write the plan's heap map (SVG) here");
  app.add_option("--trace", options.trace,
                 "Write the profiled pass here (JSON trace; with --memory min, its sharing "
                 "claims), for memoplan plan");
  app.add_option("--kernels", options.kernels,
                 "stock, or tuned: also time a copy on memoplan's tuned kernels (docs/KERNELS.md)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Kernels>{{"stock", Kernels::kStock}, {"tuned", Kernels::kTuned}}));
  app.add_option("--memory", options.memory,
                 "offset: every planned tensor gets bytes of its own; min: an elementwise op's "
                 "output takes its dying input's bytes, a concat's inputs lie in its output, "
                 "and convolutions and max poolings run in parts where that shrinks their "
                 "temporaries (docs/TORCH_EXT.md, \"Sharing bytes\")")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Memory>{{"offset", Memory::kOffset}, {"min", Memory::kMin}}));
  app.add_option("--budget", options.budget,
                 "Also time a copy under this memory budget for weights + activations: 64MiB, "
                 "1.5GiB, or 25% (of the weights plus the slab) (docs/BUDGET.md)");
  std::string page_cache = "warm";
  app.add_option("--page-cache", page_cache,
                 "warm, or cold: evict the weight file from the page cache before each budgeted "
                 "pass")
      ->check(CLI::IsMember({"warm", "cold"}));
  app.add_flag("--json", options.json, "Print one JSON object instead of the report");
  app.add_flag("-q,--quiet", quiet, "No progress on stderr");
  bool no_rss = false;
  app.add_flag("--no-rss", no_rss,
               "Skip the peak-RSS probes (each copy's peak in a process of its own)");
  app.add_option("--rss-probe", options.rss_probe)
      ->check(CLI::IsMember({"unplanned", "planned", "tuned"}))
      ->group("");  // internal: the probe process itself
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line like every other error (CLI11's own format adds a second, "Run with --help").
    return fail(kExitBadInput, std::string(e.what()) + " (memoplan run --help)");
  }
  options.progress = !quiet;
  options.cold = page_cache == "cold";
  if (!options.budget.empty() && !memoplan::torch_ext::parse_budget(options.budget)) {
    return fail(kExitBadInput, "--budget '" + options.budget +
                                   "': expected bytes (64MiB, 1.5GiB, 100000) or a share (25%)");
  }
  if (!options.budget.empty() && (options.threads != 1 || options.kernels != Kernels::kStock)) {
    return fail(kExitBadInput,
                "--budget runs one inference thread on stock kernels (--threads 1, --kernels "
                "stock): a budget holds for one pass at a time");
  }
  options.measure_rss = !no_rss;
  // The flags are checked before LibTorch loads anything: a typo fails at once.
  if (!options.input.empty()) {
    if (auto shape = memoplan::run::parse_shape_range(options.input); !shape) {
      return fail(kExitBadInput, shape.error());
    }
  }
  if (!options.dtype.empty() && !memoplan::run::known_dtype(options.dtype)) {
    return fail(kExitBadInput,
                "unknown dtype '" + options.dtype + "' (" + memoplan::run::kDtypeList + ")");
  }
  if (!known_strategy(options.strategy)) {
    return fail(kExitBadInput,
                "unknown strategy '" + options.strategy + "' (memoplan plan --list shows them)");
  }
  if (memoplan::torch_ext::is_aoti_package(options.model)) {
    if (!memoplan::torch_ext::aoti_supported()) {
      return fail(kExitBadInput, memoplan::torch_ext::aoti_package_unsupported(options.model));
    }
    // A package is compiled code without a graph: its run() is planned as one call.
    if (options.kernels != Kernels::kStock || options.memory != Memory::kOffset ||
        !options.budget.empty() || !options.heapmap.empty() || !options.trace.empty()) {
      return fail(kExitBadInput,
                  options.model +
                      ": an AOTInductor package runs Inductor's kernels and is planned with "
                      "--kernels stock --memory offset, without --budget, --heapmap or --trace "
                      "(each of those rewrites or reads a TorchScript graph)");
    }
  }
  if (options.model.empty()) {
    std::string looked;
    options.model = default_model(looked);
    if (options.model.empty()) {
      return fail(kExitBadInput, "no MODEL given and the default model is missing (looked for " +
                                     looked + "); make it with: " + kMakeDefault);
    }
  }
  // Debian's OpenBLAS (pthreads) keeps each idle worker spinning for 2^28 cycles (~0.1 s) after
  // a call: with several intra-op threads those spinners take the cores OpenMP's threads (aten's,
  // oneDNN's) need next (mobilenet_v3_large, two threads: every copy 1.4x slower). The timeout is
  // read when OpenBLAS loads, before main: set it (2^4 cycles) and start again. The user's own
  // setting is kept.
  if (options.intra_op > 1 && std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then go on as we are
  }
  try {
    if (!options.rss_probe.empty()) {
      memoplan::run::run_rss_probe(options);
      return 0;
    }
    memoplan::run::RunReport report = memoplan::run::run_session(options);
    if (options.measure_rss) {
      const bool tuned = options.kernels == Kernels::kTuned;
      if (options.progress) {
        fmt::print(stderr, "measuring peak RSS in {} fresh processes\n", tuned ? 3 : 2);
      }
      const memoplan::run::ProbeRss unplanned =
          memoplan::run::measure_peak_rss(options, "unplanned", &report.rss_error);
      report.peak_rss_bytes_unplanned = unplanned.peak_bytes;
      report.runtime_rss_bytes = unplanned.runtime_bytes;
      if (report.rss_error.empty()) {
        report.peak_rss_bytes_planned =
            memoplan::run::measure_peak_rss(options, "planned", &report.rss_error).peak_bytes;
      }
      if (tuned && report.rss_error.empty()) {
        report.peak_rss_bytes_tuned =
            memoplan::run::measure_peak_rss(options, "tuned", &report.rss_error).peak_bytes;
      }
    }
    if (options.json) {
      fmt::print("{}\n", memoplan::run::format_json(report));
    } else {
      fmt::print("{}", memoplan::run::format_text(report));
    }
    return report.passes_differing == 0 ? 0 : kExitFailed;
  } catch (const memoplan::run::BadInput& e) {
    return fail(kExitBadInput, e.what());
  } catch (const std::exception& e) {
    return fail(kExitFailed, e.what());
  }
}

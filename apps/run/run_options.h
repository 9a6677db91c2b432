// The options of `memoplan run` (memoplan-run), as parsed from its command line.
#pragma once

#include <string>

#include "memoplan/torch/plan.h"  // Kernels, Memory

namespace memoplan::run {

using torch_ext::Kernels;
using torch_ext::Memory;

struct RunOptions {
  std::string model;             // a TorchScript file (resolved: never empty here)
  std::string input;             // "1x3x224x224" or with ranges "1x8:256"; empty: the file's shape
  uint64_t seed = 0;             // of the shapes drawn from ranges
  std::string draw = "uniform";  // how ranged dims are drawn: "uniform" or "lognormal"
  std::string dtype;             // "float32", "int64", ...; empty: the file's, else float32
  int threads = 1;               // inference threads
  int intra_op = 1;              // intra-op threads of each (aten's, OpenBLAS's, oneDNN's)
  // LibTorch's TensorExpr fuser for every TorchScript copy (--fuser; off by default, why:
  // memoplan/torch/fuser.h).
  bool fuser = false;
  int iters = 40;  // timed iterations: one unplanned and one planned pass each
  int warmup = 3;  // untimed iterations per thread first
  // Untimed passes of each copy right before each of its blocks of timed ones: 0, the copies
  // alternate pass by pass (each evicts the others' weights from the caches); K, each starts its
  // block with its weights warm.
  int warm_passes = 0;
  // Timed passes of one copy in a row (iterations [i, i + block), on their own inputs) before the
  // next copy runs the same ones. 1: the copies alternate pass by pass. A small model's pass
  // after another copy's is slow for several passes, warm pass or not (traced mobilenet_v3_small
  // at 128x128, tuned: 1.03 ms after one warm pass, 0.55 back to back): a block of 10-20 times
  // each copy as a server running that one model back to back does, still interleaved. The
  // unplanned copy's outputs of a block are held until the others' are compared with them.
  int block = 1;
  std::string strategy = "greedy_by_size";
  // "tuned": a third copy, planned with memoplan's tuned kernels (docs/KERNELS.md), timed in the
  // same iterations.
  Kernels kernels = Kernels::kStock;
  // "min": the planned copies share bytes where ops allow (torch_ext::PlanOptions::memory).
  Memory memory = Memory::kOffset;
  // "64MiB", "1.5GiB", bytes, or "25%" (of the weights plus the planned copy's slab): a fourth
  // copy runs under that memory budget; empty: none.
  std::string budget;
  bool cold = false;     // --page-cache cold: the weight file evicted before each budgeted pass
  std::string heapmap;   // SVG to write, or empty
  std::string trace;     // the profiled pass's trace to write (JSON), or empty
  bool json = false;     // one JSON object on stdout instead of the report
  bool progress = true;  // progress on stderr
  // Peak RSS of each copy, each in a fresh process of its own (rss_probe.h); off: --no-rss.
  bool measure_rss = true;
  // Internal: this process is such a probe ("unplanned" or "planned"), not a run.
  std::string rss_probe;
};

}  // namespace memoplan::run

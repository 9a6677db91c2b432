// The malloc+free fast path of whatever allocator serves this process: glibc when run plainly,
// or the one named in LD_PRELOAD (libmemoplan_preload.so, jemalloc, tcmalloc, mimalloc, or the shim
// in front of one of them). The binary calls plain malloc/free and never links the shim.
//  * BM_PassLoop: one inference-like pass per iteration: memoplan_pass_begin (when the shim is
//    loaded), a chain of 8 layers, each allocating an output and a workspace (16 allocations of 8
//    tensor sizes from 4 KiB to 1 MiB, up to 3 alive at once), one byte written into each, the
//    frees, memoplan_pass_end. Under the shim in mode:auto these are replay hits: the warm-up
//    passes run outside the timed region.
//  * BM_Malloc64K: malloc(64 KiB) + free, nothing around it. Under the shim, automatic pass
//    detection finds the period-1 "pass" during the untimed warm-up and replays it.
//  * BM_Malloc64: malloc(64) + free: below min_size, always the shim's fallback allocator.
//  * BM_Calloc64: calloc(1, 64) + free, the same with zeroed memory.
// Time per malloc+free pair is 1 / items_per_second (CPU time).
//
// Under the shim each thread gets one replay plan for its lifetime, so run one benchmark per
// process (bench/run_shim_bench.sh does) or the later ones miss the earlier one's plan:
//   MEMOPLAN_CONF=mode:auto,stats_print:true LD_PRELOAD=build/interpose/libmemoplan_preload.so
//   build/bench/shim_bench --benchmark_filter='^BM_PassLoop$'   (one command line)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "allocator_info.h"
#include "memoplan/pass.h"

namespace {

// ResNet-like tensors (float32): 64x56x56, 128x28x28, 256x14x14, 512x7x7 activations, an im2col
// workspace of 1 MiB, and 36 KiB / 16 KiB / 4 KiB buffers.
struct Layer {
  size_t output;
  size_t workspace;
};
constexpr Layer kLayers[] = {
    {802816, 1048576}, {802816, 36864}, {401408, 16384}, {401408, 36864},
    {200704, 16384},   {200704, 4096},  {100352, 4096},  {4096, 16384},
};
constexpr int kLayerCount = sizeof(kLayers) / sizeof(kLayers[0]);
constexpr int kPairsPerPass = 2 * kLayerCount;

inline void touch(void* p) {
  static_cast<volatile char*>(p)[0] = 1;
  benchmark::DoNotOptimize(p);
}

// noinline: the call sites (and so the shim's call-site keys) stay the same in every caller.
__attribute__((noinline)) void run_pass() {
  if (memoplan_pass_begin) memoplan_pass_begin();
  void* input = nullptr;
  for (const Layer& layer : kLayers) {
    void* output = malloc(layer.output);
    void* workspace = malloc(layer.workspace);
    if (!output || !workspace) abort();
    touch(output);
    touch(workspace);
    free(workspace);
    if (input) free(input);
    input = output;
  }
  free(input);
  if (memoplan_pass_end) memoplan_pass_end();
}

void* calloc_bytes(size_t size) { return calloc(1, size); }

// One allocation and its free, the allocation function and size fixed per instantiation.
template <void* (*Allocate)(size_t), size_t kSize>
__attribute__((noinline)) void pair() {
  void* p = Allocate(kSize);
  if (!p) abort();
  touch(p);
  free(p);
}

// The shim profiles after `passes` warm-up passes and replays from the pass after the profiled
// one; two more than that leaves it in steady state before the timer starts.
int warmup_passes() {
  int passes = 2;
  if (const char* conf = getenv("MEMOPLAN_CONF")) {
    if (const char* p = strstr(conf, "passes:")) passes = atoi(p + strlen("passes:"));
  }
  return passes + 2;
}

// Runs `body` warmup + 1 times untimed, then once per benchmark iteration. Warm-up and timed calls
// must be the same call instruction: the shim's call-site key hashes the return addresses above
// malloc, so a separate warm-up loop (or a compiler that splits this one in two) profiles
// allocations that the timed loop never makes. Hence one do-while, noinline, and an indirect
// call the optimizer cannot specialize. KeepRunning() starts the timer on its first call.
__attribute__((noinline)) void drive(benchmark::State& state, int warmup, void (*body)()) {
  do {
    body();
  } while (warmup-- > 0 || state.KeepRunning());
}

void BM_PassLoop(benchmark::State& state) {
  drive(state, warmup_passes(), run_pass);
  state.SetItemsProcessed(state.iterations() * kPairsPerPass);
  state.counters["pairs_per_iter"] = kPairsPerPass;
}
BENCHMARK(BM_PassLoop);

// Enough repetitions for the shim's automatic detection (first search at 64 records, a period
// needs to repeat twice) to have switched the thread to replay.
constexpr int kWarmupPairs = 512;

void bench_pairs(benchmark::State& state, void (*body)()) {
  drive(state, kWarmupPairs, body);
  state.SetItemsProcessed(state.iterations());
  state.counters["pairs_per_iter"] = 1;
}

void BM_Malloc64K(benchmark::State& state) { bench_pairs(state, pair<malloc, 64 << 10>); }
BENCHMARK(BM_Malloc64K);
void BM_Malloc64(benchmark::State& state) { bench_pairs(state, pair<malloc, 64>); }
BENCHMARK(BM_Malloc64);
void BM_Calloc64(benchmark::State& state) { bench_pairs(state, pair<calloc_bytes, 64>); }
BENCHMARK(BM_Calloc64);

}  // namespace

int main(int argc, char** argv) {
  const std::string chain = memoplan::bench::malloc_chain_text();
  const std::string versions = memoplan::bench::allocator_versions();
  const char* conf = getenv("MEMOPLAN_CONF");
  const bool shim = memoplan_pass_begin != nullptr;
  fprintf(stderr, "shim_bench: malloc from %s (loaded: %s)%s%s\n", chain.c_str(), versions.c_str(),
          shim ? "; MEMOPLAN_CONF=" : "", shim ? (conf ? conf : "") : "");
  benchmark::AddCustomContext("malloc_chain", chain);
  benchmark::AddCustomContext("allocators", versions);
  if (shim) benchmark::AddCustomContext("memoplan_conf", conf ? conf : "");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// torch_alloc_bench's command line: what to run and how it is labelled in the CSV.
#pragma once

#include <string>
#include <vector>

namespace memoplan::bench::torch_alloc {

struct Options {
  std::string model;
  std::string name;    // the model's name in the CSV; default: the file's stem
  std::string config;  // the allocator configuration's label, echoed into the CSV
  std::string input;   // e.g. 1x3x224x224; default: the file's "input_shape" extra file
  int batch = 0;       // > 0: replaces the input's first size
  int size = 0;        // > 0: image height and width (4-D inputs) or sequence length (2-D, 3-D)
  std::vector<int> threads{1};
  int warmup = 5;       // the profiling executor re-optimizes the graph during the first 2-3 passes
  int passes = 20;      // timed passes per thread
  int timed_total = 0;  // > 0: timed passes per phase, split over its threads (at least 1 each)
  int sample_ms = 10;   // memory sampling period; 0: off
  std::string memory_trace;  // every memory sample of every phase, CSV
  bool marks = true;
  std::string plan;  // --plan STRATEGY: plan the module with memoplan's LibTorch graph pass
};

inline constexpr const char* kCsvHeader =
    "config,model,input,threads,warmup,passes,median_ms,p90_ms,min_ms,mean_ms,max_ms,"
    "passes_per_s,minor_faults_per_pass,preempted_per_pass,allocs_per_pass,frees_per_pass,reallocs_"
    "per_pass,zero_size_per_pass,"
    "bytes_per_pass,maxrss_kib,rss_after_load_kib,hwm_passes_kib,rss_end_kib,output_fnv1a,"
    "malloc_chain,avg_rss_kib,je_mapped_avg_kib,je_active_avg_kib,memory_samples,je_mutex_ops,"
    "je_mutex_waits,je_mutex_wait_ms,je_mutex_max_wait_us,graph_hits,graph_fallbacks,"
    "graph_escaping,graph_slab_bytes,graph_lower_bound_bytes";

// Prints `message` and the usage on stderr and exits 2.
[[noreturn]] void usage(const std::string& message);
// Parses argv; prints usage and exits 2 on a bad command line, prints the CSV header and exits 0
// for --header.
Options parse(int argc, char** argv);

}  // namespace memoplan::bench::torch_alloc

// Peak RSS of each copy of `memoplan run`, each measured in a fresh process of its own: the run's
// own process holds two or three copies of the model, so its peak says nothing about either.
// memoplan-run runs itself again with --rss-probe unplanned|planned: that process loads the model
// once, runs the same warm-up and passes on the same threads (planned: plan() first, as a user's
// process would) and prints its VmHWM (ru_maxrss survives exec: it would be the run's). No torch
// headers.
#pragma once

#include <cstdint>
#include <string>

#include "run_options.h"

namespace memoplan::run {

// The probe process's part (session.cc): prints "runtime_rss_bytes N" (VmRSS before the model is
// loaded: the process, LibTorch and memoplan) and "peak_rss_bytes N" (VmHWM at the end) on stdout.
void run_rss_probe(const RunOptions& options);

// A probe's two figures; both 0 when it could not be measured.
struct ProbeRss {
  uint64_t peak_bytes = 0;
  uint64_t runtime_bytes = 0;
};

// The run's part: spawns the probe for `which` ("unplanned", "planned" or "tuned") and returns
// its figures; zeros and `error` set when it could not be measured.
ProbeRss measure_peak_rss(const RunOptions& options, const std::string& which, std::string* error);

}  // namespace memoplan::run

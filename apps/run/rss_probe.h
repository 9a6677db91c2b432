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

// The probe process's part (session.cc): prints "peak_rss_bytes N" on stdout.
void run_rss_probe(const RunOptions& options);

// The run's part: spawns the probe for `which` ("unplanned" or "planned") and returns its peak
// RSS in bytes; 0 and `error` set when it could not be measured.
uint64_t measure_peak_rss(const RunOptions& options, const std::string& which, std::string* error);

}  // namespace memoplan::run

#include "torch_alloc_options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace memoplan::bench::torch_alloc {

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr,
               "torch_alloc_bench: %s\nusage: torch_alloc_bench --model FILE.pt [--name NAME] "
               "[--config LABEL] [--input 1x3x224x224] [--batch B] [--size S] [--threads T[,T...]] "
               "[--warmup W] [--passes N] [--timed-total N] [--sample-ms MS] [--memory-trace FILE] "
               "[--marks 0|1] [--plan STRATEGY]\n       torch_alloc_bench --header\n",
               message.c_str());
  std::exit(2);
}

namespace {

int to_int(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1 << 20) {
    usage(flag + " needs a non-negative integer, got '" + text + "'");
  }
  return static_cast<int>(value);
}

}  // namespace

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--header") {
      std::printf("%s\n", kCsvHeader);
      std::exit(0);
    }
    if (i + 1 >= argc) usage("missing value for " + flag);
    const char* value = argv[++i];
    if (flag == "--model") {
      o.model = value;
    } else if (flag == "--name") {
      o.name = value;
    } else if (flag == "--config") {
      o.config = value;
    } else if (flag == "--input") {
      o.input = value;
    } else if (flag == "--batch") {
      o.batch = to_int(flag, value);
    } else if (flag == "--size") {
      o.size = to_int(flag, value);
    } else if (flag == "--threads") {
      o.threads.clear();
      std::stringstream in(value);
      for (std::string t; std::getline(in, t, ',');) o.threads.push_back(to_int(flag, t.c_str()));
    } else if (flag == "--warmup") {
      o.warmup = to_int(flag, value);
    } else if (flag == "--passes") {
      o.passes = to_int(flag, value);
    } else if (flag == "--timed-total") {
      o.timed_total = to_int(flag, value);
    } else if (flag == "--sample-ms") {
      o.sample_ms = to_int(flag, value);
    } else if (flag == "--memory-trace") {
      o.memory_trace = value;
    } else if (flag == "--plan") {
      o.plan = value;
    } else if (flag == "--marks") {
      o.marks = std::string(value) != "0";
    } else {
      usage("unknown option " + flag);
    }
  }
  if (o.model.empty()) usage("--model is required");
  if (o.passes < 1) usage("need passes >= 1");
  if (o.threads.empty() ||
      std::any_of(o.threads.begin(), o.threads.end(), [](int t) { return t < 1; })) {
    usage("need threads >= 1");
  }
  if (o.name.empty()) {
    const size_t slash = o.model.find_last_of('/');
    o.name = o.model.substr(slash == std::string::npos ? 0 : slash + 1);
    o.name = o.name.substr(0, o.name.find('.'));
  }
  return o;
}

}  // namespace memoplan::bench::torch_alloc

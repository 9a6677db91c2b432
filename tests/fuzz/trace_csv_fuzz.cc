// Fuzz target: CSV traces (parse_trace_csv, what `memoplan plan x.csv` reads). Any text must give
// a trace or an error message, never a crash; an accepted trace must plan and validate.
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "memoplan/trace_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const memoplan::Result<memoplan::Trace> trace = memoplan::parse_trace_csv(text, "fuzz.csv");
  if (!trace) {
    FUZZ_CHECK(trace.error().rfind("fuzz.csv", 0) == 0, "error without the origin: %s",
               trace.error().c_str());
    return 0;
  }
  memoplan::fuzz::check_accepted_trace(*trace);
  return 0;
}

// kernel_report()'s pieces: each part of tuned/ that decides something registers, once at load, a
// function that prints its decisions, one line each; the report lists them by rank (the order a
// reader follows: products, layers, layouts, convolutions). No torch headers.
#pragma once

#include <string>

namespace memoplan::torch_ext::tuned {

using Report = std::string (*)();
// For a namespace-scope initializer: `const bool registered = add_report(rank, &report);`.
bool add_report(int rank, Report report);
// Every registered report, by rank (ties: registration order).
std::string all_reports();

}  // namespace memoplan::torch_ext::tuned

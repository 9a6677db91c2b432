// The registry behind kernel_report() (reports.h): a few entries, added while the library loads.
#include "reports.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace memoplan::torch_ext::tuned {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<int, Report>> reports;
};
Registry& registry() {
  static auto* r = new Registry();  // never destroyed: a report may be asked for at exit
  return *r;
}

}  // namespace

bool add_report(int rank, Report report) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.reports.emplace_back(rank, report);
  std::stable_sort(r.reports.begin(), r.reports.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return true;
}

std::string all_reports() {
  std::vector<std::pair<int, Report>> reports;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    reports = r.reports;
  }
  std::string out;
  for (const auto& [rank, report] : reports) out += report();
  return out;
}

}  // namespace memoplan::torch_ext::tuned

// Shape families on a zoo model (issue 18): profile a TorchScript model at a few values of one
// input dim, fit the family (memoplan/planner/family.h), then at every other value compare the
// prediction with a profiled pass and measure the two ways to plan an unseen shape:
//  * per shape: instantiate the family's trace and plan it (greedy_by_size), timed;
//  * learned order: the same, plus the rows placed in the order of a `best` plan of the largest
//    fitted shape (PlanOptions::row_order), the smaller plan kept (what the graph pass does);
//  * bucket: one plan made for the largest value, reused for every smaller one (valid when no
//    size shrinks as the dim grows), its slab against the shape's own lower bound.
// For example (one line):
//   build/bench/family_bench models/bert_encoder.pt --shape 1x128 --dim 1 --high 30522
//     --fit 16,40,64 --eval 8,24,32,48,96,128,200,256
#include <ATen/Parallel.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "memoplan/planner/family.h"
#include "memoplan/planner/planner.h"
#include "memoplan/torch/profiler.h"

namespace {

std::vector<int64_t> parse_list(const std::string& text, char separator) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, separator)) values.push_back(std::stoll(item));
  return values;
}

struct Args {
  std::string model;
  std::vector<int64_t> shape;
  size_t dim = 0;
  int64_t high = 0;  // > 0: int64 token ids in [0, high); else float32 randn
  std::vector<int64_t> fit, eval;
  int warmup = 3;
  std::string strategy = "greedy_by_size";
};

bool parse(int argc, char** argv, Args* a) {
  if (argc < 2) return false;
  a->model = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--shape")
      a->shape = parse_list(v, 'x');
    else if (k == "--dim")
      a->dim = std::stoul(v);
    else if (k == "--high")
      a->high = std::stoll(v);
    else if (k == "--fit")
      a->fit = parse_list(v, ',');
    else if (k == "--eval")
      a->eval = parse_list(v, ',');
    else if (k == "--warmup")
      a->warmup = std::stoi(v);
    else if (k == "--strategy")
      a->strategy = v;
    else
      return false;
  }
  return !a->shape.empty() && a->dim < a->shape.size() && a->fit.size() >= 2;
}

std::vector<int64_t> dims_at(const Args& a, int64_t value) {
  std::vector<int64_t> d = a.shape;
  d[a.dim] = value;
  return d;
}

// One profiled pass at `dims`, after `warmup` unprofiled ones (the JIT's profiling runs).
memoplan::Trace profile(torch::jit::Module& module, const Args& a,
                        const std::vector<int64_t>& dims) {
  const at::Tensor x = a.high > 0 ? at::randint(a.high, dims, at::kLong) : at::randn(dims);
  torch::NoGradGuard no_grad;
  for (int i = 0; i < a.warmup; ++i) module.forward({x});
  memoplan::torch_ext::ProfileSession session;
  session.begin();
  { torch::jit::IValue out = module.forward({x}); }
  return session.end();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: %s MODEL.pt --shape 1x128 --dim 1 [--high N] --fit 16,40,64 "
                 "[--eval 8,24,...] [--warmup 3] [--strategy greedy_by_size]\n",
                 argv[0]);
    return 2;
  }
  at::set_num_threads(1);
  torch::jit::Module module = torch::jit::load(a.model);
  module.eval();

  std::vector<memoplan::Trace> fitted;
  for (int64_t v : a.fit) fitted.push_back(profile(module, a, dims_at(a, v)));
  std::vector<memoplan::family::Sample> samples;
  for (size_t i = 0; i < a.fit.size(); ++i) samples.push_back({dims_at(a, a.fit[i]), &fitted[i]});
  const auto model = memoplan::family::fit_family(samples);
  if (!model.ok()) {
    std::printf("family: not fitted: %s\n", model.error().c_str());
    return 1;
  }
  const auto summary = memoplan::family::summarize(*model);
  std::printf(
      "family: %llu allocations fitted on %zu shapes: %llu constant, %llu linear, %llu "
      "quadratic, %llu cubic\n",
      static_cast<unsigned long long>(summary.allocations), a.fit.size(),
      static_cast<unsigned long long>(summary.by_degree[0]),
      static_cast<unsigned long long>(summary.by_degree[1]),
      static_cast<unsigned long long>(summary.by_degree[2]),
      static_cast<unsigned long long>(summary.by_degree[3]));

  // The learned order: a `best` plan of the largest fitted shape, once.
  size_t largest = 0;
  for (size_t i = 1; i < a.fit.size(); ++i) {
    if (a.fit[i] > a.fit[largest]) largest = i;
  }
  memoplan::PlanOptions learn_options;
  learn_options.strategy = "best";
  learn_options.strategy_options.time_limit_s = 0.05;
  const auto learn_start = std::chrono::steady_clock::now();
  const auto learned_on = memoplan::plan_trace(fitted[largest], learn_options);
  if (!learned_on.ok()) {
    std::printf("learned order: %s\n", learned_on.error().c_str());
    return 1;
  }
  const std::vector<size_t> learned = memoplan::placement_order(fitted[largest], *learned_on);
  std::printf(
      "learned order: best on value %lld in %.1f ms, %.4fx of its lower bound\n",
      static_cast<long long>(a.fit[largest]),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - learn_start)
          .count(),
      learned_on->ratio_to_lower_bound());

  // The bucket plan: made once for the largest value evaluated.
  const int64_t top = *std::max_element(a.eval.begin(), a.eval.end());
  const auto top_trace = memoplan::family::instantiate(*model, dims_at(a, top));
  if (!top_trace.ok()) {
    std::printf("bucket: %s\n", top_trace.error().c_str());
    return 1;
  }
  const auto top_plan = memoplan::plan_trace(*top_trace);
  if (!top_plan.ok()) {
    std::printf("bucket plan: %s\n", top_plan.error().c_str());
    return 1;
  }
  std::printf(
      "| %s | allocations | predicted = profiled | plan time per shape (us, median of 21) "
      "| slab per shape (KiB) | learned order: plan time (us) | learned order: slab (KiB) "
      "| lower bound (KiB) | bucket plan fits | bucket slab / "
      "lower bound |\n|---|---|---|---|---|---|---|---|---|---|\n",
      "value");
  int failures = 0;
  for (int64_t v : a.eval) {
    const std::vector<int64_t> dims = dims_at(a, v);
    const memoplan::Trace profiled = profile(module, a, dims);
    const auto predicted = memoplan::family::instantiate(*model, dims);
    bool same = predicted.ok() && predicted->allocations.size() == profiled.allocations.size();
    for (size_t i = 0; same && i < profiled.allocations.size(); ++i) {
      const auto &p = predicted->allocations[i], &q = profiled.allocations[i];
      same = p.size == q.size && p.begin == q.begin && p.end == q.end;
    }
    failures += !same;
    std::vector<double> times, learned_times;
    uint64_t slab = 0, learned_slab = 0;
    for (int r = 0; r < 21 && predicted.ok(); ++r) {
      for (bool with_order : {false, true}) {
        const auto start = std::chrono::steady_clock::now();
        const auto t = memoplan::family::instantiate(*model, dims);
        memoplan::PlanOptions plan_options;
        plan_options.strategy = a.strategy;
        if (with_order) plan_options.row_order = learned;
        const auto plan = memoplan::plan_trace(*t, plan_options);
        (with_order ? learned_times : times)
            .push_back(
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count());
        (with_order ? learned_slab : slab) = plan.ok() ? plan->slab_bytes : 0;
      }
    }
    const auto own = memoplan::plan_trace(profiled);
    const uint64_t bound = own.ok() ? own->lower_bound_bytes : 0;
    bool fits = true;  // every block within its slot of the bucket plan
    for (size_t i = 0; fits && i < profiled.allocations.size(); ++i) {
      fits = profiled.allocations[i].size <= top_trace->allocations[i].size;
    }
    std::printf("| %lld | %zu | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.2f |\n",
                static_cast<long long>(v), profiled.allocations.size(), same ? "yes" : "NO",
                times.empty() ? 0.0 : median(times), slab / 1024.0,
                learned_times.empty() ? 0.0 : median(learned_times), learned_slab / 1024.0,
                bound / 1024.0, fits ? "yes" : "no",
                bound ? double(top_plan->slab_bytes) / double(bound) : 0.0);
  }
  return failures ? 1 : 0;
}

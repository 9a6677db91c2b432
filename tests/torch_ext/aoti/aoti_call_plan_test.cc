// An AOTInductor package's run() planned by PlannedCall (issue 55), on LibTorch >= 2.6: its
// intermediate buffers reach c10's CPU allocator and come from the slab in steady state, every
// pass fully planned, one tensor malloc a pass (the output), outputs identical to an unplanned
// copy of the same package. Then AotiPackage's first run() from two threads at once, with one
// model and with a model per thread (concurrency 2), outputs as the loader's. (LibTorch 2.6's
// container can deadlock there unless one call goes first, as AotiPackage makes it: seen with
// resnet18 at two threads in torch_alloc_bench. On this small package the race window is too
// narrow to hit reliably: removing the guard did not hang 3 x 20 tries; a hang would fail by
// CTest's timeout.)
//
//     aoti_call_plan_test tiny_cnn.pt2      (made by make_packages.py; input 1x3x32x32 FP32)
#include <c10/core/InferenceMode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <ATen/ATen.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "memoplan/torch/aoti_package.h"
#include "memoplan/torch/call_plan.h"

namespace {

int failed(const char* what) {
  std::fprintf(stderr, "FAIL: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memoplan::torch_ext;
  if (argc != 2) return failed("usage: aoti_call_plan_test PACKAGE.pt2");
  c10::InferenceMode inference;
  torch::inductor::AOTIModelPackageLoader unplanned(argv[1]), planned(argv[1]);
  at::manual_seed(0);
  const at::Tensor x = at::randn({1, 3, 32, 32});
  const std::vector<at::Tensor> in{x};
  const std::vector<c10::IValue> key{x};
  PlannedCall call;
  // The loader's outputs as the call's result (a list of tensors).
  auto planned_run = [&] { return c10::IValue(c10::List<at::Tensor>(planned.run(in))); };
  std::vector<at::Tensor> out;
  const PlanSummary summary = call.plan(key, planned_run);
  std::printf("planned tensors per pass %llu, slab %llu bytes, offset lower bound %llu\n",
              static_cast<unsigned long long>(summary.planned_tensors),
              static_cast<unsigned long long>(summary.slab_bytes),
              static_cast<unsigned long long>(summary.lower_bound_bytes));
  if (summary.planned_tensors == 0) return failed("no tensor of the package's run was planned");
  constexpr int kPasses = 10;
  const PlanStats before = plan_stats();
  for (int i = 0; i < kPasses; ++i) {
    const std::vector<at::Tensor> expected = unplanned.run(in);
    out = call.run(key, planned_run).toTensorList().vec();
    if (!last_pass().fully_planned()) return failed("a pass was not fully planned");
    if (out.size() != expected.size()) return failed("a different number of outputs");
    for (size_t k = 0; k < out.size(); ++k) {
      if (!at::equal(out[k], expected[k])) return failed("outputs differ from the unplanned run");
    }
  }
  const PlanStats d = plan_stats() - before;
  std::printf("%d passes: %llu tensors from the slab, %llu tensor mallocs, fallbacks %llu\n",
              kPasses, static_cast<unsigned long long>(d.planned_hits),
              static_cast<unsigned long long>(d.tensor_mallocs),
              static_cast<unsigned long long>(d.fallback_not_planned + d.fallback_overlap));
  if (d.planned_hits != summary.planned_tensors * kPasses) return failed("planned hits");
  if (d.tensor_mallocs != out.size() * kPasses) return failed("tensor mallocs beyond the outputs");

  const at::Tensor expected = unplanned.run(in)[0];
  constexpr int kTries = 20;  // fresh packages: the race is on a container's first run() only
  for (size_t concurrency : {1, 2}) {
    for (int attempt = 0; attempt < kTries; ++attempt) {
      AotiPackage package(argv[1], concurrency);
      if (package.concurrency() != concurrency) return failed("the package's concurrency");
      if (package.input_count() != 1 || package.output_count() != 1) return failed("its counts");
      c10::IValue first[2];
      std::atomic<int> ready{0};
      auto call = [&](int k) {
        c10::InferenceMode guard;
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        first[k] = package.run(key);
      };
      std::thread other(call, 1);
      call(0);
      other.join();
      for (const c10::IValue& result : first) {
        if (!at::equal(result.toTensorList().get(0), expected)) {
          return failed("a first run() differs from the loader's");
        }
      }
    }
    std::printf("%d x two first run() calls at once, concurrency %zu: no deadlock, outputs equal\n",
                kTries, concurrency);
  }
  std::printf("PASS\n");
  return 0;
}

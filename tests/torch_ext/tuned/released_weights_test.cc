// Weights held once (PlanOptions::release_weights, budget/released_weights.h), the packed
// weights' census (tuned/weight_cache.h) and forget_module: a tuned plan that owns its module keeps
// the packed forms a planned pass uses and nothing else; the plain weights leave memory and still
// read correctly; a module forgotten leaves nothing behind.
// (An unplanned module runs aten: original.forward below is the reference.)
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/script.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

#include "blocked_test_support.h"
#include "budget/released_weights.h"
#include "memoplan/torch/plan.h"
#include "plan/budget_api.h"  // module_id
#include "planning/pass_runtime.h"
#include "tuned_support.h"  // measure_both
#include "tuned_test_support.h"
#include "weight_cache.h"

namespace memoplan::torch_ext {
namespace {

using testing::tuned;

// Four 3x3 convolutions of 64 channels (147 KiB of weights each) with batch norms, and a small
// linear head (below a page: it stays on the heap).
torch::jit::Module conv_net() {
  torch::manual_seed(11);
  torch::jit::Module m("ReleasedNet");
  for (const char* name : {"a", "b", "c", "d"}) {
    blocked_test::add_conv(m, name, 64, 64, 3);
    blocked_test::add_bn(m, std::string(name) + "_bn", 64);
  }
  m.register_parameter("fc", torch::randn({10, 64}) * 0.1, false);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.define(R"(
    def block(self, x, w, bw, bb, bm, bv):
        y = torch.conv2d(x, w, None, [1, 1], [1, 1])
        return torch.relu(torch.batch_norm(y, bw, bb, bm, bv, False, 0.1, 1e-5, False))
    def forward(self, x):
        h = self.block(x, self.a, self.a_bn_w, self.a_bn_b, self.a_bn_m, self.a_bn_v)
        h = self.block(h, self.b, self.b_bn_w, self.b_bn_b, self.b_bn_m, self.b_bn_v) + h
        h = self.block(h, self.c, self.c_bn_w, self.c_bn_b, self.c_bn_m, self.c_bn_v)
        h = self.block(h, self.d, self.d_bn_w, self.d_bn_b, self.d_bn_m, self.d_bn_v) + h
        return torch.linear(h.mean([2, 3]), self.fc, None)
  )");
  m.eval();
  return m;
}

std::string temp_dir() {
  char name[] = "/tmp/memoplan-released-XXXXXX";
  const char* made = ::mkdtemp(name);
  return made ? made : "/tmp";
}

TEST(ReleasedWeights, ATunedPlanKeepsThePackedFormsAndGivesThePlainWeightsBack) {
  torch::jit::Module kept = conv_net();
  torch::jit::Module released = kept.clone();
  torch::jit::Module original = kept.clone();  // never planned: the weights' values
  const torch::Tensor x = torch::randn({1, 64, 20, 20});
  c10::InferenceMode inference;
  const PlanSummary with_copy = plan(kept, {x}, tuned());
  PlanOptions options = tuned();
  options.release_weights = true;
  options.weights_dir = temp_dir();
  const PlanSummary once = plan(released, {x}, options);

  EXPECT_EQ(with_copy.released_weight_bytes, 0u);
  // Every convolution's weight (4 x 147,456 B) went into the file; the head is below a page.
  EXPECT_GE(once.released_weight_bytes, 4u * 147456);
  EXPECT_LT(once.released_weight_bytes, 4u * 147456 + 4u * 4096);
  EXPECT_GT(once.packed_weight_bytes, 0u);
  if (blocked_test::blocked_layout_here()) {
    // Every convolution runs on its packed form: a planned pass read none of the plain weights.
    EXPECT_EQ(once.released_weight_resident_bytes, 0u);
  }
  // What the tuned kernels promise, pass after pass: within 1e-5 of aten's (the copy that keeps its
  // weights and the unplanned module). Not bit for bit: each graph measures its own layout plan
  // and thread splits, which a loaded machine may decide otherwise (1 in 8-12 runs under load).
  for (int pass = 0; pass < 3; ++pass) {
    const torch::Tensor input = torch::randn({1, 64, 20, 20});
    const torch::Tensor got = released.forward({input}).toTensor();
    EXPECT_LT(testing::relative_difference(got, kept.forward({input}).toTensor()), 1e-5);
    EXPECT_LT(testing::relative_difference(got, original.forward({input}).toTensor()), 1e-5);
  }
  // The plain weights still read as they were (from the file, faulted back in).
  for (const char* name : {"a", "b", "c", "d", "fc"}) {
    EXPECT_TRUE(torch::equal(released.attr(name).toTensor(), original.attr(name).toTensor()))
        << name;
  }
  std::filesystem::remove_all(options.weights_dir);  // mapped still: unlinked, not gone yet
}

// A weight file of the right name and size whose bytes differ (a hash collision, a file changed
// behind memoplan's back) is refused, naming the file, and the module keeps its own weights.
TEST(ReleasedWeights, AWeightFileWithOtherBytesIsRefused) {
  PlanOptions options = tuned();
  options.release_weights = true;
  options.weights_dir = temp_dir();
  const torch::Tensor x = torch::randn({1, 64, 12, 12});
  c10::InferenceMode inference;
  torch::jit::Module first = conv_net();
  plan(first, {x}, options);
  std::string path;
  for (const auto& entry : std::filesystem::directory_iterator(options.weights_dir)) {
    path = entry.path().string();
  }
  ASSERT_FALSE(path.empty());
  {
    // A copy with one byte changed, renamed over the file (the first module's mapping keeps the
    // old one).
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes[bytes.size() / 2] ^= 0x40;
    std::ofstream(path + ".x", std::ios::binary) << bytes;
    std::filesystem::rename(path + ".x", path);
  }
  torch::jit::Module second = conv_net();
  const torch::jit::Module original = conv_net();
  try {
    plan(second, {x}, options);
    FAIL() << "expected the weight file to be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("does not hold this module's weights"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  for (const char* name : {"a", "b", "c", "d"}) {
    EXPECT_TRUE(torch::equal(second.attr(name).toTensor(), original.attr(name).toTensor())) << name;
  }
  std::filesystem::remove_all(options.weights_dir);
}

// A measurement of memoplan's way against aten's gives back the released pages aten's side read:
// a large layer's plain weight (vgg16's 392 MiB classifier) stays out of the next layer's
// measurement, where it set plan()'s peak.
// conv_net() planned tuned with its weights released into a file under a new directory (the
// caller removes it).
struct ReleasedNet {
  torch::jit::Module m = conv_net();
  PlanOptions options = tuned();
  int64_t id = 0;
  ReleasedNet() {
    options.release_weights = true;
    options.weights_dir = temp_dir();
    c10::InferenceMode inference;
    plan(m, {torch::randn({1, 64, 12, 12})}, options);
    id = module_id(m);
  }
  ~ReleasedNet() { std::filesystem::remove_all(options.weights_dir); }
};

TEST(ReleasedWeights, AMeasurementGivesBackThePlainPagesAtensSideRead) {
  ReleasedNet net;
  torch::jit::Module& m = net.m;
  const int64_t id = net.id;
  c10::InferenceMode inference;
  auto read_plain = [&] {
    float sum = 0;
    for (const char* name : {"a", "b", "c", "d"})
      sum += m.attr(name).toTensor().sum().item<float>();
    return sum;
  };
  read_plain();
  ASSERT_GE(budget::released_weights(id).resident_bytes, 4u * 147456 / 2);
  const tuned::Measured measured = tuned::measure_both([] {}, [&] { read_plain(); }, 2);
  EXPECT_GT(measured.aten_ms, 0.0);
  EXPECT_EQ(budget::released_weights(id).resident_bytes, 0u);
}

// A sliced packing gives back each slice's rows as it goes (give_back_plain_range): the pages
// wholly inside the range leave memory, the weight's other pages stay, and a range outside every
// released mapping (a heap tensor) is left alone.
TEST(ReleasedWeights, ARangeGivesBackOnlyThePagesInsideIt) {
  ReleasedNet net;
  const int64_t id = net.id;
  c10::InferenceMode inference;
  const torch::Tensor a = net.m.attr("a").toTensor();  // 147,456 B: 36 pages
  EXPECT_GT(a.sum().item<float>() * 0, -1.f);          // read: its pages come in
  const uint64_t before = budget::released_weights(id).resident_bytes;
  ASSERT_GE(before, a.nbytes() - 4096);
  budget::give_back_plain_range(a.data_ptr(), a.nbytes() / 2);
  const uint64_t after = budget::released_weights(id).resident_bytes;
  EXPECT_LE(before - after, a.nbytes() / 2);
  EXPECT_GE(before - after, a.nbytes() / 2 - 2 * 4096);
  const torch::Tensor heap = torch::ones({1 << 16});
  budget::give_back_plain_range(heap.data_ptr(), heap.nbytes());
  EXPECT_EQ(heap.sum().item<float>(), 65536.f);
  EXPECT_EQ(budget::released_weights(id).resident_bytes, after);
}

// plan() gives back the pages of the slab its last pass replayed in on the calling thread (a
// server plans on one thread and serves on others); a later pass on that thread faults them in
// again, zeroed, and computes as before.
TEST(ReleasedWeights, TheCallingThreadsSlabPagesGoBackAndComeBackOnUse) {
  torch::jit::Module m = conv_net();
  const torch::Tensor x = torch::randn({1, 64, 16, 16});
  c10::InferenceMode inference;
  plan(m, {x}, tuned());
  const torch::Tensor first = m.forward({x}).toTensor();
  EXPECT_GT(runtime_pass::discard_thread_slabs(module_id(m)), 0u);
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), first));
  EXPECT_EQ(runtime_pass::discard_thread_slabs(-1), 0u) << "no module: nothing to give back";
}

// The census keeps only the forms a pass used; a site that makes a new form while one runs drops
// its forms that pass has not used. Another module's sites are left alone, by the census as by
// forget_sites.
TEST(PackedCensus, KeepsOnlyTheFormsThePassUsed) {
  auto* cache = new tuned::WeightCache<int>([](const int&) -> uint64_t { return 100; });
  const int64_t module = 1 << 20, other = module + 1;  // ids no plan() gave out
  int64_t site1, site2, site_other;
  {
    tuned::RewriteOwner owner(module);
    site1 = tuned::new_site(2);
    site2 = site1 + 1;
  }
  {
    tuned::RewriteOwner owner(other);
    site_other = tuned::new_site();
  }
  EXPECT_EQ(tuned::site_module(site2), module);
  EXPECT_EQ(tuned::site_module(site_other), other);
  const at::Tensor weight = torch::ones({4});
  tuned::Sources sources;
  sources.add(weight);
  auto get = [&](int64_t site, int form) {
    return *cache->get(
        site, sources, [form](const int& f) { return f == form; },
        [form] { return std::make_shared<int>(form); });
  };
  EXPECT_EQ(get(site1, 10), 10);
  EXPECT_EQ(get(site1, 11), 11);  // two forms of one site, made in the same census
  EXPECT_EQ(get(site2, 20), 20);
  EXPECT_EQ(get(site_other, 30), 30);
  EXPECT_EQ(cache->bytes(module), 300u);
  EXPECT_EQ(cache->bytes(-1), 400u);
  tuned::begin_census(module);
  EXPECT_EQ(get(site1, 11), 11);  // used: kept
  EXPECT_EQ(get(site2, 21), 21);  // a new form of site 2: its unused 20 goes at once
  EXPECT_EQ(cache->bytes(module), 300u);
  const uint64_t kept = tuned::end_census(module);  // site 1's form 10 was not used
  EXPECT_EQ(kept, tuned::packed_bytes(module));
  EXPECT_EQ(cache->bytes(module), 200u);
  EXPECT_EQ(cache->bytes(other), 100u) << "another module's census is its own";
  int made = 0;
  cache->get(
      site1, sources, [](const int& f) { return f == 10; },
      [&made] {
        ++made;
        return std::make_shared<int>(10);
      });
  EXPECT_EQ(made, 1) << "a form the census dropped is made again on use";
  EXPECT_EQ(cache->bytes(module), 300u) << "outside a census a new form drops none";
  tuned::forget_sites(module);
  EXPECT_EQ(cache->bytes(module), 0u);
  EXPECT_EQ(cache->bytes(other), 100u);
  tuned::forget_sites(other);
}

// forget_module: the module's packed forms and slabs go (the calling thread's at once, another
// thread's at its next pass of any module); another module's stay; a forgotten module that runs
// after all is planned anew and still right.
TEST(ForgetModule, DropsWhatTheModuleHeldAndLeavesOthers) {
  torch::jit::Module gone = conv_net();
  torch::jit::Module stays = gone.clone();
  torch::jit::Module original = gone.clone();
  const torch::Tensor x = torch::randn({1, 64, 20, 20});
  c10::InferenceMode inference;
  plan(gone, {x}, tuned());
  plan(stays, {x}, tuned());
  // A second thread serves both (a worker): it holds a slab of each.
  std::mutex mutex;
  std::condition_variable changed;
  int step = 0;
  std::thread worker([&] {
    c10::InferenceMode worker_inference;
    gone.forward({x});
    stays.forward({x});
    std::unique_lock<std::mutex> lock(mutex);
    step = 1;
    changed.notify_all();
    changed.wait(lock, [&] { return step == 2; });
    stays.forward({x});  // its next pass: the forgotten module's slab goes
    step = 3;
    changed.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return step == 1; });
  }
  const ModuleMemory before = module_memory(gone);
  const ModuleMemory other = module_memory(stays);
  EXPECT_GT(before.packed_weight_bytes, 0u);
  EXPECT_GT(before.weight_bytes, 4u * 147456);
  EXPECT_GE(before.slab_bytes, before.plan_slab_bytes);  // the worker's, and this thread's
  EXPECT_GT(before.plan_slab_bytes, 0u);

  forget_module(gone);
  const ModuleMemory after = module_memory(gone);
  EXPECT_EQ(after.packed_weight_bytes, 0u);
  EXPECT_EQ(after.plan_slab_bytes, 0u);
  EXPECT_LT(after.slab_bytes, before.slab_bytes) << "this thread's slab went at once";
  {
    std::unique_lock<std::mutex> lock(mutex);
    step = 2;
    changed.notify_all();
    changed.wait(lock, [&] { return step == 3; });
  }
  worker.join();
  EXPECT_EQ(module_memory(gone).slab_bytes, 0u) << "the worker's went at its next pass";
  EXPECT_EQ(module_memory(stays).packed_weight_bytes, other.packed_weight_bytes);

  for (int pass = 0; pass < 6; ++pass) {  // warm-up, profile and replay again
    const torch::Tensor input = torch::randn({1, 64, 20, 20});
    const torch::Tensor want = original.forward({input}).toTensor();
    EXPECT_LT(testing::relative_difference(gone.forward({input}).toTensor(), want), 1e-5);
    EXPECT_LT(testing::relative_difference(stays.forward({input}).toTensor(), want), 1e-5);
  }
}

}  // namespace
}  // namespace memoplan::torch_ext

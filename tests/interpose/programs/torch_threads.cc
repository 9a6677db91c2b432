// A multi-threaded LibTorch program under the shim: worker threads each run forward passes of one
// small CNN (intra-op threads = 1) with marked passes, and every output must equal, bit for bit,
// the output computed before the workers started. Exits non-zero on any difference.
// A third argument "unmarked" runs it as an unmodified C++ server would: no pass marks (the shim
// must detect the pass), and between passes a response is formatted whose size changes from
// request to request, into a string reserved at its size; "unmarked_growing" grows that string
// by appending instead (std::string doubles its capacity: a varying number of requests of the
// same few sizes between passes, which only the search through irregular work sees through;
// docs/SHIM.md, "Pass detection").
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/pass.h"

int main(int argc, char** argv) {
  const int workers = argc > 1 ? std::atoi(argv[1]) : 4;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 30;
  const std::string style = argc > 3 ? argv[3] : "marked";
  const bool marked = style == "marked", growing = style == "unmarked_growing";
  torch::manual_seed(0);
  at::set_num_threads(1);
  torch::nn::Sequential model(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)), torch::nn::ReLU(),
      torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).stride(2).padding(1)),
      torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(4)),
      torch::nn::Flatten(), torch::nn::Linear(32 * 16, 10));
  model->eval();
  const torch::Tensor input = torch::randn({2, 3, 64, 64});
  torch::Tensor reference;
  {
    torch::InferenceMode guard;
    reference = model->forward(input).clone();
  }

  std::vector<int> mismatches(workers, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      at::set_num_threads(1);
      torch::InferenceMode guard;
      for (int pass = 0; pass < passes; ++pass) {
        if (marked && memoplan_pass_begin) memoplan_pass_begin();
        const torch::Tensor out = model->forward(input);
        if (!torch::equal(out, reference)) ++mismatches[w];
        if (marked && memoplan_pass_end) memoplan_pass_end();
        if (!marked) {  // the response: 4-20 KiB of text, its size different every request
          std::string response;
          const int values = 500 + (pass * 7919 + w * 104729) % 2000;
          if (!growing) response.reserve(static_cast<size_t>(values) * 16);
          for (int i = 0; i < values; ++i) response += std::to_string(out[0][i % 10].item<float>());
          if (response.empty()) ++mismatches[w];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int total = 0;
  for (int m : mismatches) total += m;
  std::printf("%d workers x %d passes: %d outputs differ\n", workers, passes, total);
  return total == 0 ? 0 : 1;
}

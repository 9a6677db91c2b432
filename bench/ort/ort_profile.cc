// ONNX Runtime's CPU session with its profiler on, answering bursts of passes as run_ort.mjs
// --serve does, for bench/ort_layers.py (per-layer times beside memoplan's). The npm package's
// node binding cannot profile (its enableProfiling does nothing), so this drives the same
// libonnxruntime.so (the one shipped inside onnxruntime-node, 1.30) through the C API: the header
// is Debian 13's libonnxruntime-dev (1.21; the C API only appends, so GetApi(20) is 1.20's table).
//
//   ort_profile MODEL.onnx INPUT.bin SHAPE DTYPE THREADS WARMUP PROFILE_PREFIX
//
// The session is run_ort.mjs's: graph optimizations "all", memory pattern and CPU arena on,
// sequential, THREADS intra-op threads and one inter-op thread; the input (DTYPE float32 or
// int64) read raw from INPUT.bin. After WARMUP passes it answers {"ready": true}, then reads a
// number N per line on stdin, runs one untimed and N timed passes and answers {"pass_ms": [...]};
// at 0 or the end of stdin it ends the profile and prints {"profile": PATH}.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: ort_profile MODEL.onnx INPUT.bin SHAPE DTYPE THREADS WARMUP "
                 "PROFILE_PREFIX\n");
    return 2;
  }
  const std::string dtype = argv[4];
  if (dtype != "float32" && dtype != "int64") {
    std::fprintf(stderr, "ort_profile: DTYPE is float32 or int64, not %s\n", argv[4]);
    return 2;
  }
  const OrtApi* api = OrtGetApiBase()->GetApi(20);
  if (api == nullptr) {
    std::fprintf(stderr, "ort_profile: this libonnxruntime has no C API version 20\n");
    return 1;
  }
  Ort::InitApi(api);
  std::vector<int64_t> shape;
  std::stringstream dims(argv[3]);
  for (std::string d; std::getline(dims, d, 'x');) shape.push_back(std::stoll(d));
  size_t count = 1;
  for (int64_t d : shape) count *= static_cast<size_t>(d);
  const size_t element = dtype == "int64" ? sizeof(int64_t) : sizeof(float);
  std::vector<unsigned char> input(count * element);
  std::ifstream file(argv[2], std::ios::binary);
  if (!file.read(reinterpret_cast<char*>(input.data()),
                 static_cast<std::streamsize>(input.size()))) {
    std::fprintf(stderr, "ort_profile: %s holds fewer than %zu values\n", argv[2], count);
    return 1;
  }
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "ort_profile");
    Ort::SessionOptions options;
    options.SetIntraOpNumThreads(std::atoi(argv[5]));
    options.SetInterOpNumThreads(1);
    options.SetExecutionMode(ORT_SEQUENTIAL);
    options.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
    options.EnableMemPattern();
    options.EnableCpuMemArena();
    options.EnableProfiling(argv[7]);
    Ort::Session session(env, argv[1], options);
    const Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    Ort::Value x =
        dtype == "int64"
            ? Ort::Value::CreateTensor<int64_t>(cpu, reinterpret_cast<int64_t*>(input.data()),
                                                count, shape.data(), shape.size())
            : Ort::Value::CreateTensor<float>(cpu, reinterpret_cast<float*>(input.data()), count,
                                              shape.data(), shape.size());
    Ort::AllocatorWithDefaultOptions allocator;
    const Ort::AllocatedStringPtr in_name = session.GetInputNameAllocated(0, allocator);
    const Ort::AllocatedStringPtr out_name = session.GetOutputNameAllocated(0, allocator);
    const char* inputs[] = {in_name.get()};
    const char* outputs[] = {out_name.get()};
    auto pass = [&] {
      const auto start = std::chrono::steady_clock::now();
      session.Run(Ort::RunOptions{}, inputs, &x, 1, outputs, 1);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
    };
    for (int i = std::atoi(argv[6]); i > 0; --i) pass();
    std::printf("{\"ready\": true}\n");
    std::fflush(stdout);
    for (int n; std::scanf("%d", &n) == 1 && n > 0;) {
      pass();  // untimed, as run_ort.mjs --serve's bursts
      std::printf("{\"pass_ms\": [");
      for (int i = 0; i < n; ++i) std::printf("%s%.4f", i ? ", " : "", pass());
      std::printf("]}\n");
      std::fflush(stdout);
    }
    std::printf("{\"profile\": \"%s\"}\n", session.EndProfilingAllocated(allocator).get());
  } catch (const Ort::Exception& e) {
    std::fprintf(stderr, "ort_profile: %s\n", e.what());
    return 1;
  }
  return 0;
}

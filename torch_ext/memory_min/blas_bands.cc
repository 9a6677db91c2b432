// The BLAS's blocking learned, and the calls it gives (blas_bands.h).
#include "blas_bands.h"

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <random>

// The BLAS aten's CPU GEMM calls (LibTorch links it; the dynamic linker binds this to the same
// library): C = A B, column-major.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace memoplan::torch_ext::blas_bands {
namespace {

// A call covers at least a quarter of the rows.
constexpr int64_t kCallsPerImage = 4;

std::vector<float> random_floats(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng);
  return out;
}

// Whether bands cut by plan_calls give the whole call's bytes for m rows of random data.
bool bands_match(int64_t m, const Blocking& b, int64_t target) {
  constexpr int64_t kN = 64, kK = 64;
  const std::vector<Call> calls = plan_calls(m, b, target);
  if (calls.size() < 2) return false;
  std::mt19937 rng(0x6d656d6f);
  const std::vector<float> a = random_floats(static_cast<size_t>(kK * m), rng);   // m x k
  const std::vector<float> w = random_floats(static_cast<size_t>(kN * kK), rng);  // k x n
  std::vector<float> whole(static_cast<size_t>(kN * m));
  gemm(m, kN, kK, a.data(), m, w.data(), whole.data(), m);
  std::vector<float> banded(whole.size(), std::nanf(""));
  std::vector<float> buffer(static_cast<size_t>(buffer_rows(calls) * kK));
  run_calls(calls, m, kN, kK, w.data(), banded.data(), buffer.data(),
            [&](int64_t column, int64_t first, int64_t rows, float* dst) {
              std::memcpy(dst, a.data() + column * m + first,
                          static_cast<size_t>(rows) * sizeof(float));
            });
  return std::memcmp(banded.data(), whole.data(), whole.size() * sizeof(float)) == 0;
}

std::optional<Blocking> find_blocking() {
  constexpr int64_t kM = 4096, kN = 64, kK = 64, kMostP = 2048;
  constexpr size_t kMostTries = 320;
  std::mt19937 rng(0x6d656d6f);
  const std::vector<float> row = random_floats(static_cast<size_t>(kK), rng);
  std::vector<float> same_rows(static_cast<size_t>(kK * kM));
  for (int64_t k = 0; k < kK; ++k) {
    std::fill_n(same_rows.begin() + k * kM, kM, row[static_cast<size_t>(k)]);
  }
  const std::vector<float> w = random_floats(static_cast<size_t>(kN * kK), rng);
  std::vector<float> product(static_cast<size_t>(kN * kM));
  gemm(kM, kN, kK, same_rows.data(), kM, w.data(), product.data(), kM);
  const float* out = product.data();
  std::vector<int64_t> changes;
  for (int64_t row = 1; row < kM; ++row) {
    for (int64_t col = 0; col < kN; ++col) {
      if (std::memcmp(out + col * kM + row, out + col * kM + row - 1, sizeof(float)) != 0) {
        changes.push_back(row);
        break;
      }
    }
  }
  std::vector<int64_t> candidates;
  for (size_t i = 0; i + 1 < changes.size(); ++i) {
    candidates.push_back((changes[i] + changes[i + 1]) / 2);
  }
  candidates.insert(candidates.end(), changes.begin(), changes.end());
  for (int64_t p = 8; p <= kMostP; p += 8) candidates.push_back(p);
  std::vector<int64_t> tried;
  for (const int64_t p : candidates) {
    if (p < 8 || p > kMostP || std::find(tried.begin(), tried.end(), p) != tried.end()) continue;
    if (tried.size() == kMostTries) break;
    tried.push_back(p);
    if (!bands_match(4 * p, Blocking{p, 1}, 2 * p)) continue;
    for (const int64_t unroll : {8, 16, 4, 32, 64, 24, 48, 2, 1}) {
      const Blocking b{p, unroll};
      if (bands_match(3 * p + p / 2 + 3, b, 2 * p) && bands_match(kM, b, calls_target(kM, b))) {
        return b;
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// Whether slices of `unit` columns (the last one what is left) give the whole call's bytes, for
// rows enough for the driver's later blocks and a column count no multiple of the unit.
bool columns_match(int64_t unit) {
  constexpr int64_t kM = 1100, kK = 72, kN = 101;
  std::mt19937 rng(0x6d656d70);
  const std::vector<float> a = random_floats(static_cast<size_t>(kK * kM), rng);  // m x k
  const std::vector<float> w = random_floats(static_cast<size_t>(kN * kK), rng);  // k x n
  std::vector<float> whole(static_cast<size_t>(kN * kM)), sliced(whole.size());
  gemm(kM, kN, kK, a.data(), kM, w.data(), whole.data(), kM);
  for (int64_t first = 0; first < kN; first += unit) {
    gemm(kM, std::min(unit, kN - first), kK, a.data(), kM, w.data() + first * kK,
         sliced.data() + first * kM, kM);
  }
  return std::memcmp(sliced.data(), whole.data(), whole.size() * sizeof(float)) == 0;
}

}  // namespace

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, float* c,
          int64_t ldc) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int ldai = static_cast<int>(lda), ldbi = ki, ldci = static_cast<int>(ldc);
  const float one = 1.0f, zero = 0.0f;
  const char no = 'N';
  sgemm_(&no, &no, &mi, &ni, &ki, &one, a, &ldai, b, &ldbi, &zero, c, &ldci);
}

std::vector<int64_t> row_blocks(int64_t m, const Blocking& b) {
  std::vector<int64_t> out;
  while (m > 0) {
    int64_t rows = m;
    if (m >= 2 * b.p) {
      rows = b.p;
    } else if (m > b.p) {
      rows = (m / 2 + b.unroll - 1) / b.unroll * b.unroll;
    }
    if (rows <= 0 || rows > m) return {};
    out.push_back(rows);
    m -= rows;
  }
  return out;
}

std::vector<Call> plan_calls(int64_t m, const Blocking& b, int64_t target) {
  const std::vector<int64_t> whole = row_blocks(m, b);
  std::vector<Call> calls;
  int64_t start = 0;
  for (size_t i = 0; i < whole.size();) {
    bool placed = false;
    int64_t rows = 0;
    for (size_t j = i; j < whole.size() && !placed; ++j) {
      rows += whole[j];
      if (rows < target && j + 1 < whole.size()) continue;
      std::vector<int64_t> want(whole.begin() + static_cast<std::ptrdiff_t>(i),
                                whole.begin() + static_cast<std::ptrdiff_t>(j) + 1);
      if (i == 0) {
        placed = row_blocks(rows, b) == want;
        if (placed) calls.push_back({start, rows, 0});
      } else {
        for (const int64_t lead : {b.p, whole[i]}) {
          if (lead > start) continue;
          std::vector<int64_t> with_lead = want;
          with_lead.insert(with_lead.begin(), lead);
          if (row_blocks(lead + rows, b) == with_lead) {
            calls.push_back({start, rows, lead});
            placed = true;
            break;
          }
        }
      }
      if (placed) {
        i = j + 1;
        start += rows;
      }
    }
    if (!placed) return {};
  }
  return calls;
}

int64_t buffer_rows(const std::vector<Call>& calls) {
  int64_t most = 0;
  for (const Call& c : calls) most = std::max(most, c.lead + c.rows);
  return most;
}

int64_t calls_target(int64_t m, const Blocking& b) {
  return std::max<int64_t>(2 * b.p, (m + kCallsPerImage - 1) / kCallsPerImage);
}

const std::optional<Blocking>& blocking() {
  static const std::optional<Blocking> found = find_blocking();
  return found;
}

int64_t column_unit() {
  static const int64_t unit = [] {
    for (const int64_t u : {4, 8, 12, 16, 24, 32, 48, 64, 96}) {
      if (columns_match(u)) return u;
    }
    return int64_t{0};
  }();
  return unit;
}

int blas_threads() {
  using Getter = int (*)();
  static const auto get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get ? get() : 1;
}

}  // namespace memoplan::torch_ext::blas_bands

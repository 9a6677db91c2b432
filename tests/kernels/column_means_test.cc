// Column means (kernels/column_means.h): bit for bit each column's float sum in row order divided
// by the row count, over widths that take the 16-, 8- and 1-column paths and their mixes.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "memoplan/kernels/column_means.h"

namespace memoplan::kernels {
namespace {

TEST(ColumnMeans, AreEachColumnsSumInRowOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const int64_t width : {1, 8, 16, 25, 33, 48}) {
    for (const int64_t rows : {1, 3, 49, 3136}) {
      std::vector<float> src(static_cast<size_t>(rows * width));
      for (float& v : src) v = normal(rng);
      std::vector<float> got(static_cast<size_t>(width));
      column_means(src.data(), rows, width, got.data());
      for (int64_t c = 0; c < width; ++c) {
        float sum = 0.0f;
        for (int64_t r = 0; r < rows; ++r) sum += src[static_cast<size_t>(r * width + c)];
        EXPECT_EQ(got[static_cast<size_t>(c)], sum / static_cast<float>(rows))
            << "width " << width << " rows " << rows << " column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace memoplan::kernels

// memoplan::parse_shape, the one parser of "1x3x224x224" (memoplan run, memoplan-serve).
#include "memoplan/shape.h"

#include <gtest/gtest.h>

namespace memoplan {
namespace {

TEST(Shape, ParsesAndPrints) {
  Result<std::vector<int64_t>> shape = parse_shape("1x3x224x224");
  ASSERT_TRUE(shape) << shape.error();
  EXPECT_EQ(*shape, (std::vector<int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(shape_text(*shape), "1x3x224x224");
  EXPECT_EQ(*parse_shape("7"), std::vector<int64_t>{7});
}

TEST(Shape, RejectsWhatIsNotAShape) {
  for (const char* bad : {"", "x", "1x", "x1", "1xx2", "1x-3", "1xa", "1x3 ", "1.5", "0x3"}) {
    Result<std::vector<int64_t>> shape = parse_shape(bad);
    ASSERT_FALSE(shape) << bad;
    EXPECT_NE(shape.error().find("bad input shape '" + std::string(bad) + "'"), std::string::npos)
        << shape.error();
  }
}

TEST(Shape, HonoursItsRules) {
  ShapeRules zero;
  zero.allow_zero = true;
  EXPECT_EQ(*parse_shape("0x3", zero), (std::vector<int64_t>{0, 3}));
  EXPECT_FALSE(parse_shape("1x1x1x1x1x1x1x1x1"));  // 9 sizes
  ShapeRules nine;
  nine.max_dims = 9;
  EXPECT_TRUE(parse_shape("1x1x1x1x1x1x1x1x1", nine));
  Result<std::vector<int64_t>> huge = parse_shape("65536x65536");
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().find("too large"), std::string::npos);
  EXPECT_FALSE(parse_shape("99999999999999999999"));  // beyond int64
}

}  // namespace
}  // namespace memoplan

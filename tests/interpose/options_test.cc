// MEMOPLAN_CONF parsing: every key, binary size suffixes, and the promise that a bad key or value
// warns once and keeps the default instead of aborting the host program.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "options.h"

namespace memoplan::shim {
namespace {

// parse_options takes a plain function pointer, so the warnings go to a global.
std::vector<std::string>& warnings() {
  static std::vector<std::string> lines;
  return lines;
}
void collect_warning(const char* message) { warnings().push_back(message); }

Options parse(const std::string& conf) {
  warnings().clear();
  Options options;
  parse_options(conf.c_str(), options, collect_warning);
  return options;
}

// Field-by-field equality: Options has no operator== and a char array.
void expect_defaults(const Options& o) {
  const Options d;
  EXPECT_EQ(o.mode, d.mode);
  EXPECT_EQ(o.fallback, d.fallback);
  EXPECT_EQ(o.min_size, d.min_size);
  EXPECT_EQ(o.passes, d.passes);
  EXPECT_EQ(o.threads, d.threads);
  EXPECT_EQ(o.callsite_depth, d.callsite_depth);
  EXPECT_EQ(o.slab_max, d.slab_max);
  EXPECT_EQ(o.max_period, d.max_period);
  EXPECT_EQ(o.detect, d.detect);
  EXPECT_EQ(o.stats_print, d.stats_print);
  EXPECT_STREQ(o.log_path, d.log_path);
  EXPECT_STREQ(o.stats_file, d.stats_file);
  EXPECT_EQ(o.stats_interval_ms, d.stats_interval_ms);
}

TEST(Options, DefaultsAreDocumentedValues) {
  const Options o;
  EXPECT_EQ(o.mode, Mode::kAuto);
  EXPECT_EQ(o.fallback, FallbackKind::kAuto);
  EXPECT_EQ(o.min_size, 4096u);
  EXPECT_EQ(o.passes, 2u);
  EXPECT_EQ(o.threads, 64u);
  EXPECT_EQ(o.callsite_depth, 4u);
  EXPECT_EQ(o.slab_max, 1ull << 30);
  EXPECT_EQ(o.max_period, 65536u);
  EXPECT_EQ(o.profile_keep, 32ull << 20);
  EXPECT_TRUE(o.detect);
  EXPECT_FALSE(o.stats_print);
  EXPECT_STREQ(o.log_path, "");
  EXPECT_STREQ(o.stats_file, "");  // no statistics file
  EXPECT_EQ(o.stats_interval_ms, 0u);
}

TEST(Options, NullAndEmptyConfKeepDefaultsSilently) {
  warnings().clear();
  Options from_null;
  parse_options(nullptr, from_null, collect_warning);
  expect_defaults(from_null);
  expect_defaults(parse(""));
  EXPECT_TRUE(warnings().empty());
}

TEST(Options, EveryKeyIsApplied) {
  const Options o = parse(
      "mode:off,fallback:jemalloc,min_size:8192,passes:5,threads:128,callsite_depth:0,"
      "slab_max:256m,max_period:1000,detect:false,stats_print:true,log:/tmp/memoplan.log");
  EXPECT_TRUE(warnings().empty()) << warnings().front();
  EXPECT_EQ(o.mode, Mode::kOff);
  EXPECT_EQ(o.fallback, FallbackKind::kJemalloc);
  EXPECT_EQ(o.min_size, 8192u);
  EXPECT_EQ(o.passes, 5u);
  EXPECT_EQ(o.threads, 128u);
  EXPECT_EQ(o.callsite_depth, 0u);
  EXPECT_EQ(o.slab_max, 256ull << 20);
  EXPECT_EQ(o.max_period, 1000u);
  EXPECT_FALSE(o.detect);
  EXPECT_TRUE(o.stats_print);
  EXPECT_STREQ(o.log_path, "/tmp/memoplan.log");
}

TEST(Options, ProfileAndReplayModesTakeTheirFiles) {
  Options o = parse("mode:profile,trace:/tmp/pass-%p-%t.json.gz");
  EXPECT_TRUE(warnings().empty());
  EXPECT_EQ(o.mode, Mode::kProfile);
  EXPECT_STREQ(o.trace_path, "/tmp/pass-%p-%t.json.gz");
  EXPECT_TRUE(portable_keys(o));
  o = parse("mode:replay,trace:/tmp/pass.json.gz,plan:/tmp/plan.json");
  EXPECT_EQ(o.mode, Mode::kReplay);
  EXPECT_STREQ(o.trace_path, "/tmp/pass.json.gz");
  EXPECT_STREQ(o.plan_path, "/tmp/plan.json");
  char text[1536];
  describe_options(o, text, sizeof text);
  EXPECT_NE(std::string(text).find("mode:replay,"), std::string::npos) << text;
  EXPECT_NE(std::string(text).find(",trace:/tmp/pass.json.gz,plan:/tmp/plan.json"),
            std::string::npos)
      << text;
  EXPECT_FALSE(portable_keys(parse("mode:auto")));
  // The default trace path has one file per process and thread.
  EXPECT_STREQ(Options{}.trace_path, "memoplan-%p-%t.trace.json.gz");
  parse("plan:" + std::string(600, 'x'));
  ASSERT_EQ(warnings().size(), 1u);
}

// Live statistics: a file rewritten every interval (and at exit), described after the others.
TEST(Options, StatsFileAndInterval) {
  Options o = parse("stats_file:/tmp/memoplan-%p.json,stats_interval_ms:250");
  EXPECT_TRUE(warnings().empty());
  EXPECT_STREQ(o.stats_file, "/tmp/memoplan-%p.json");
  EXPECT_EQ(o.stats_interval_ms, 250u);
  char text[1536];
  describe_options(o, text, sizeof text);
  EXPECT_NE(std::string(text).find(",stats_file:/tmp/memoplan-%p.json,stats_interval_ms:250"),
            std::string::npos)
      << text;
  // A file without an interval: written at exit only.
  o = parse("stats_file:/tmp/s.json");
  EXPECT_TRUE(warnings().empty());
  EXPECT_STREQ(o.stats_file, "/tmp/s.json");
  EXPECT_EQ(o.stats_interval_ms, 0u);
  // An interval is a count of milliseconds, no suffix; an overlong path keeps no file.
  o = parse("stats_file:/tmp/s.json,stats_interval_ms:1k");
  EXPECT_EQ(o.stats_interval_ms, 0u);
  EXPECT_EQ(warnings().size(), 1u);
  o = parse("stats_file:/" + std::string(600, 'a') + ",stats_interval_ms:100");
  EXPECT_STREQ(o.stats_file, "");
  EXPECT_EQ(o.stats_interval_ms, 0u);  // and the interval alone writes nothing
  EXPECT_EQ(warnings().size(), 2u);
}

TEST(Options, OtherSpellingsOfEnumsAndBooleans) {
  Options o = parse("mode:auto,fallback:next,detect:1,stats_print:1");
  EXPECT_EQ(o.mode, Mode::kAuto);
  EXPECT_EQ(o.fallback, FallbackKind::kNext);
  EXPECT_TRUE(o.detect);
  EXPECT_TRUE(o.stats_print);
  o = parse("detect:0,stats_print:false");
  EXPECT_FALSE(o.detect);
  EXPECT_FALSE(o.stats_print);
  EXPECT_TRUE(warnings().empty());
}

TEST(Options, SizesTakeBinarySuffixesInEitherCase) {
  EXPECT_EQ(parse("min_size:64k").min_size, 64u << 10);
  EXPECT_EQ(parse("min_size:64K").min_size, 64u << 10);
  EXPECT_EQ(parse("min_size:1M").min_size, 1u << 20);
  EXPECT_EQ(parse("min_size:1m").min_size, 1u << 20);
  EXPECT_EQ(parse("slab_max:2g").slab_max, 2ull << 30);
  EXPECT_EQ(parse("slab_max:2G").slab_max, 2ull << 30);
  EXPECT_EQ(parse("min_size:4kb").min_size, 4u << 10);
  EXPECT_EQ(parse("min_size:4096b").min_size, 4096u);
  EXPECT_EQ(parse("min_size:4096B").min_size, 4096u);
  EXPECT_TRUE(warnings().empty());
}

TEST(Options, LaterDuplicateKeyWins) { EXPECT_EQ(parse("passes:3,passes:7").passes, 7u); }

struct BadItem {
  const char* conf;
  const char* warning_mentions;  // the offending text must be named in the warning
};

class OptionsBadItem : public ::testing::TestWithParam<BadItem> {};

TEST_P(OptionsBadItem, WarnsOnceAndKeepsEveryDefault) {
  const Options o = parse(GetParam().conf);
  expect_defaults(o);
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find(GetParam().warning_mentions), std::string::npos) << warnings()[0];
}

INSTANTIATE_TEST_SUITE_P(
    Options, OptionsBadItem,
    ::testing::Values(BadItem{"bogus:1", "bogus"}, BadItem{"MODE:off", "MODE"},
                      BadItem{"novalue", "novalue"}, BadItem{"mode:sometimes", "sometimes"},
                      BadItem{"mode:", "mode"}, BadItem{"fallback:tcmalloc", "tcmalloc"},
                      BadItem{"min_size:", "min_size"}, BadItem{"min_size:zz", "zz"},
                      BadItem{"min_size:-1", "-1"}, BadItem{"min_size:64x", "64x"},
                      BadItem{"min_size:1kk", "1kk"}, BadItem{"min_size:k", "'k'"},
                      BadItem{"min_size: 64", " 64"},
                      BadItem{"min_size:99999999999999999999", "99999999999999999999"},
                      BadItem{"slab_max:17179869184g", "17179869184g"}, BadItem{"passes:2k", "2k"},
                      BadItem{"threads:1M", "1M"}, BadItem{"max_period:64b", "64b"},
                      BadItem{"detect:yes", "yes"}, BadItem{"stats_print:TRUE", "TRUE"},
                      BadItem{"log:", "log"}, BadItem{"stats_file:", "stats_file"},
                      BadItem{"stats_interval_ms:5s", "5s"}, BadItem{"stats_interval_ms:-1", "-1"},
                      BadItem{"stats_interval_ms:100", "stats_interval_ms needs stats_file"}));

TEST(Options, BadItemsDoNotDisturbGoodOnes) {
  const Options o = parse("passes:4,bogus:1,min_size:zz,threads:8");
  EXPECT_EQ(o.passes, 4u);
  EXPECT_EQ(o.threads, 8u);
  EXPECT_EQ(o.min_size, 4096u);
  EXPECT_EQ(warnings().size(), 2u);
}

TEST(Options, OutOfRangeCombinationsFallBackToDefaults) {
  EXPECT_EQ(parse("slab_max:3m").slab_max, 1ull << 30);  // not a power of two
  EXPECT_EQ(warnings().size(), 1u);
  EXPECT_EQ(parse("slab_max:2k").slab_max, 1ull << 30);     // below 4k
  EXPECT_EQ(parse("slab_max:2048g").slab_max, 1ull << 30);  // above 1T
  EXPECT_EQ(parse("slab_max:1024g").slab_max, 1ull << 40);  // 1T itself is fine
  EXPECT_EQ(parse("slab_max:4k").slab_max, 4096u);
  EXPECT_EQ(parse("threads:0").threads, 64u);
  EXPECT_EQ(warnings().size(), 1u);
  EXPECT_EQ(parse("threads:4097").threads, 64u);
  EXPECT_EQ(parse("threads:4096").threads, 4096u);
  EXPECT_EQ(parse("callsite_depth:17").callsite_depth, 4u);
  EXPECT_EQ(warnings().size(), 1u);
  EXPECT_EQ(parse("callsite_depth:16").callsite_depth, 16u);
  EXPECT_TRUE(warnings().empty());
}

TEST(Options, MinSizeIsRaisedToHoldAFreeListLink) {
  EXPECT_EQ(parse("min_size:1").min_size, 16u);
  EXPECT_EQ(parse("min_size:0").min_size, 16u);
  EXPECT_EQ(parse("min_size:16").min_size, 16u);
}

TEST(Options, OverlongConfIsIgnoredAsAWhole) {
  std::string conf = "passes:9,";
  conf += std::string(2100, 'x');
  expect_defaults(parse(conf));
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find("2047"), std::string::npos);
}

TEST(Options, OverlongLogPathKeepsTheDefault) {
  const Options o = parse("log:/" + std::string(600, 'a'));
  EXPECT_STREQ(o.log_path, "");
  EXPECT_EQ(warnings().size(), 1u);
}

TEST(Options, DescribeListsEveryValue) {
  const Options o = parse("mode:off,min_size:64k,passes:3,threads:8,detect:false,huge_pages:0");
  char text[512];
  const size_t n = describe_options(o, text, sizeof text);
  EXPECT_EQ(n, std::string(text).size());
  EXPECT_STREQ(text,
               "mode:off,fallback:auto,min_size:65536,passes:3,threads:8,callsite_depth:4,"
               "slab_max:1073741824,max_period:65536,idle_release:10000,profile_keep:33554432,"
               "detect:false,huge_pages:false,stats_print:false,verbose:false");
  // A description parses back to the same options.
  const Options again = parse(text);
  EXPECT_TRUE(warnings().empty());
  EXPECT_EQ(again.min_size, o.min_size);
  EXPECT_FALSE(again.huge_pages);
  EXPECT_TRUE(parse("").huge_pages);
  EXPECT_EQ(parse("idle_release:250").idle_release, 250u);
  EXPECT_EQ(parse("fallback:mimalloc").fallback, FallbackKind::kMimalloc);
  EXPECT_EQ(parse("fallback:next").fallback, FallbackKind::kNext);
  EXPECT_EQ(parse("idle_release:0").idle_release, 0u);
  EXPECT_EQ(parse("profile_keep:0").profile_keep, 0u);
  EXPECT_EQ(parse("profile_keep:16m").profile_keep, 16ull << 20);
  EXPECT_EQ(again.passes, o.passes);
  EXPECT_EQ(again.detect, o.detect);
  EXPECT_EQ(again.mode, o.mode);
}

TEST(Options, DescribeTruncatesToTheBuffer) {
  char text[16];
  const size_t n = describe_options(Options{}, text, sizeof text);
  EXPECT_EQ(n, sizeof text - 1);
  EXPECT_STREQ(text, "mode:auto,fallb");
}

TEST(Options, ModeNames) {
  EXPECT_STREQ(to_string(Mode::kOff), "off");
  EXPECT_STREQ(to_string(Mode::kAuto), "auto");
}

}  // namespace
}  // namespace memoplan::shim

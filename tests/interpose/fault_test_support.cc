#include "fault_test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "state.h"
#include "stats.h"

namespace memoplan::shim::testing {

uint32_t slabs_in_use() { return global().slabs.arenas_in_use(); }

void expect_in_fresh_process(const std::string& extra_conf, const std::function<int()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (global().init_state.load() != 0) {
          fprintf(stderr, "the engine was initialized before the test body\n");
          _exit(2);
        }
        const char* conf = getenv("MEMOPLAN_CONF");
        const std::string full = std::string(conf && *conf ? conf : "") +
                                 (conf && *conf && !extra_conf.empty() ? "," : "") + extra_conf;
        setenv("MEMOPLAN_CONF", full.c_str(), 1);
        const int status = body();
        fflush(stderr);
        _exit(status);
      },
      ::testing::ExitedWithCode(0), "");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace memoplan::shim::testing

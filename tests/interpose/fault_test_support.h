// Shared by the fault-injection tests (interpose_fault_tests, linked with the engine built with
// MEMOPLAN_FAULT_INJECTION): the statistics they look at, and a fresh process for the cases that
// happen at the engine's initialization.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace memoplan::shim::testing {

uint32_t slabs_in_use();

// Runs `body` in a process of its own whose engine is not initialized yet (GoogleTest's
// "threadsafe" death test: the test binary run again for this test alone) and expects it to exit
// with 0. `body` returns its exit status and says on stderr what went wrong. The child's
// MEMOPLAN_CONF is the test's plus `extra_conf`. Callers must not use the engine before.
void expect_in_fresh_process(const std::string& extra_conf, const std::function<int()>& body);

std::string read_text_file(const std::string& path);

}  // namespace memoplan::shim::testing

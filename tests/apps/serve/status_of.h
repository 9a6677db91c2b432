// The serve unit tests' view of an HttpError: the status `f` throws, 0 when it returns.
#pragma once

#include <functional>

#include "http_error.h"

namespace memoplan::serve {

inline int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const HttpError& e) {
    return e.status();
  }
  return 0;
}

}  // namespace memoplan::serve

// An error the server answers with the protocol's JSON error body {"error": "..."} and an HTTP
// status: 400 for a request the model cannot take, 404 for an unknown model, 503 when the queue
// is full or the model not ready. Thrown by the codec and the checks, caught by the routes.
#pragma once

#include <stdexcept>
#include <string>

namespace memoplan::serve {

class HttpError : public std::runtime_error {
 public:
  HttpError(int status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

inline HttpError bad_request(const std::string& message) { return HttpError(400, message); }

}  // namespace memoplan::serve

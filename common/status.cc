#include "common/status.h"

namespace gcagent {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (ok()) return "ok";
  std::string s(statusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace gcagent

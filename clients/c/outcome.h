// The result of a client operation inside the library: a gcagent_status code and the message
// that gcagent_last_error() will return. The C edge (c_api.cc) is the only place that turns it
// into an int.
#pragma once

#include <string>
#include <utility>

#include "gcagent_client.h"

namespace gcagent::client {

struct Outcome {
  gcagent_status code = GCAGENT_OK;
  std::string message;
  bool ok() const { return code == GCAGENT_OK; }
};

inline Outcome success() { return {}; }
inline Outcome failure(gcagent_status code, std::string message) { return {code, std::move(message)}; }

}  // namespace gcagent::client

#define GCAGENT_CLIENT_RETURN_IF_FAILED(expr)          \
  do {                                                 \
    ::gcagent::client::Outcome gc_outcome_ = (expr);   \
    if (!gc_outcome_.ok()) return gc_outcome_;         \
  } while (0)

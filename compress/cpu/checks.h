// Size checks every codec makes before touching memory.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "common/status.h"
#include "common/str_cat.h"

namespace gcagent::compress {

// encode(): the state and output spans must be large enough.
inline Status checkEncodeSpans(std::string_view codec, size_t n, size_t state_have,
                               size_t state_need, size_t out_have, size_t out_need) {
  if (state_have < state_need)
    return Status::invalidArgument(strCat(codec, ": state holds ", state_have, " floats, ",
                                          state_need, " needed for ", n, " elements"));
  if (out_have < out_need)
    return Status::invalidArgument(strCat(codec, ": output holds ", out_have, " bytes, ", out_need,
                                          " needed for ", n, " elements"));
  return {};
}

// decodeAdd() of a fixed-size encoding: the buffer must be exactly the expected size.
inline Status checkEncodedSize(std::string_view codec, size_t n, size_t have, size_t need) {
  if (have != need)
    return Status::dataLoss(strCat(codec, ": encoded buffer holds ", have, " bytes, expected ",
                                   need, " for ", n, " elements"));
  return {};
}

}  // namespace gcagent::compress

// The registry's CPU factory for a codec definition, whichever kind it is.
#pragma once

#include <memory>

#include "compress/compll/definition.h"
#include "compress/compll/quantizer_codec.h"
#include "compress/compll/selector_codec.h"

namespace gcagent::compress::compll {

template <class Def>
Result<std::unique_ptr<Codec>> makeDefined(const Params& params, const CodecEnv& env) {
  if constexpr (Selecting<Def>) {
    return makeSelector<Def>(params, env);
  } else {
    return makeQuantizer<Def>(params, env);
  }
}

}  // namespace gcagent::compress::compll

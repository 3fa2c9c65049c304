// Turns error feedback off for a codec whose quantizer always folds a residual in (2bit,
// 1bit, onebit, topk, dgc, threshold): each encode starts from a zeroed state and throws the
// state away afterwards, so the output is the plain quantizer of the gradient alone and
// nothing carries over between steps. The codecs read this from their `error_feedback`
// parameter (default true); turning it off is what the convergence check compares against.
#pragma once

#include <memory>

#include "compress/codec.h"

namespace gcagent::compress {

// `inner` as a stateless codec (stateElements() == 0, an empty residual).
std::unique_ptr<Codec> withoutErrorFeedback(std::unique_ptr<Codec> inner);

// `codec` unchanged when error_feedback is true, else withoutErrorFeedback(codec).
std::unique_ptr<Codec> applyErrorFeedback(bool error_feedback, std::unique_ptr<Codec> codec);

}  // namespace gcagent::compress

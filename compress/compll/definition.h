// What a codec definition (compress/codecs/<name>.h) is written with: the element
// vocabulary (lanes.h), the code layout (codes.h), the slice statistics (slice_stats.h) and
// the parameter reader. A quantizer definition is a struct with
//   kName, kSummary          the registry row: the name configs and clients send, one line
//   Codes                    compll::Codes<bits>: where each element's code lives
//   Params, read(reader)     its parameters, read and range-checked (host only)
//   encode<L>(l, g, r, p)    the code of g + r, leaving in r what the code does not carry
//   decode<L>(l, code, p)    the value a code stands for
// A scaled quantizer sends one fp32 scale per slice in front of its codes, and has besides
//   stats(p)                 the slice statistics its scale is made from (Stat bits; 0: none)
//   scale(stats, n, p)       the scale of a slice of n elements
//   encode<L>(l, g, r, p, scale), decode<L>(l, code, p, scale)
// A stochastic quantizer draws one uniform number per element, from a counter-based stream
// (compress/random_math.h) the definition names for each slice:
//   stream(p, key, slice, step)      the slice's stream
//   encode<L>(l, g, r, p, scale, u)  with u, the element's draw in [0, 1)
// A definition may also set kPaddingChecked (decode rejects set bits past the last code),
// kNeverWritten (a code value decode rejects) and kFeedbackByDefault (false: the
// error_feedback parameter defaults to off, and no state is kept unless asked). Nothing else:
// the CPU loops (vectorised, split over the codec pool), the GPU kernels, the checks of what
// arrives, the `error_feedback` parameter and the registry row come from compll.
#pragma once

#include <concepts>
#include <string_view>

#include "compress/compll/codes.h"
#include "compress/compll/lanes.h"
#include "compress/compll/slice_stats.h"
#include "compress/params.h"
#include "compress/random_math.h"

namespace gcagent::compress::compll {

template <class Def>
concept Scaled = requires(const SliceStats& s, const typename Def::Params& p) {
  { Def::stats(p) } -> std::convertible_to<unsigned>;
  { Def::scale(s, size_t{0}, p) } -> std::convertible_to<float>;
};

template <class Def>
concept Stochastic = requires(const typename Def::Params& p) {
  { Def::stream(p, uint64_t{0}, uint32_t{0}, uint64_t{0}) } -> std::convertible_to<uint64_t>;
};

template <class Def>
inline constexpr bool kPaddingChecked = requires { requires Def::kPaddingChecked; };

template <class Def>
inline constexpr bool kChecksCodes = requires { Def::kNeverWritten; };

template <class Def>
constexpr bool feedbackByDefault() {
  if constexpr (requires { Def::kFeedbackByDefault; }) {
    return Def::kFeedbackByDefault;
  } else {
    return true;
  }
}

// Bytes in front of the codes: the scale.
template <class Def>
inline constexpr size_t kHeaderBytes = Scaled<Def> ? 4 : 0;

}  // namespace gcagent::compress::compll

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
// A block-scaled quantizer sends one scale per block of elements instead, all the blocks'
// scales in front of the codes, and has besides (instead of stats and scale)
//   block(p)                 elements per block (GC_HD): a power of two, 32 .. 256
//   Scale                    how a scale travels: Fp32Scale, or Pow2Scale (OCP MX's E8M0)
//   blockScale(max_abs, p)   the scale of a block whose largest |x| is max_abs (finite)
//   encode<L>(l, g, r, p, scale[, u]), decode<L>(l, code, p, scale)
// and may have
//   rotates(p)               true: each block is sent rotated by D then H (random signs drawn
//                            from the slice's stream, then the Walsh-Hadamard transform), and
//                            the decoder turns it back (H, / block, D); the last block is
//                            padded with zeros to a whole block, and all of it is sent
//   unwrittenMask(p)         codes c with (c & mask) == mask are never written (decode
//                            refuses them): fp8's NaN and infinity
// A stochastic definition may say draws(p) = false when this configuration takes no draws
// (they are then 0, and not computed).
// A selecting definition sends a few elements as (index, value) pairs (the sparse format,
// compress/sparse/sparse_format.h) instead of a code per element, and has (instead of Codes,
// encode and decode)
//   selection(p)             a compll::Selection (selection.h): how many go, how the cut is
//                            sampled, and the sparsity warm-up
//   stream(p, key, slice, step)      the slice's stream the cut's sample is drawn from
//   update<L>(l, g, v, p)    one step of an element: v, its residual, updated from g; the
//                            largest |v| are sent, and sent elements start again from 0
// It may keep one more array per element beside the residual (kKeepsMoment = true), which a
// sent element clears too; update then takes it: update<L>(l, g, v, m, p).
// A definition may also set kPaddingChecked (decode rejects set bits past the last code),
// kNeverWritten (a code value decode rejects) and kFeedbackByDefault (false: the
// error_feedback parameter defaults to off, and no state is kept unless asked). Nothing else:
// the CPU loops (vectorised, split over the codec pool), the GPU kernels, the checks of what
// arrives, the `error_feedback` parameter and the registry row come from compll.
#pragma once

#include <concepts>
#include <string_view>

#include "compress/compll/blocks.h"
#include "compress/compll/codes.h"
#include "compress/compll/lanes.h"
#include "compress/compll/selection.h"
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
concept BlockScaled = requires(const typename Def::Params& p) {
  { Def::block(p) } -> std::convertible_to<uint32_t>;
  { Def::blockScale(0.0f, p) } -> std::convertible_to<float>;
  Def::Scale::kBytes;
};

template <class Def>
concept Selecting = requires(const typename Def::Params& p) {
  { Def::selection(p) } -> std::convertible_to<Selection>;
};

template <class Def>
inline constexpr bool kKeepsMoment = requires { requires Def::kKeepsMoment; };

// Whether encode and decode take a scale (the slice's or the block's).
template <class Def>
inline constexpr bool kTakesScale = Scaled<Def> || BlockScaled<Def>;

inline constexpr uint32_t kMaxBlock = 256;

template <class Def>
GC_HD bool rotates(const typename Def::Params& p) {
  if constexpr (requires { Def::rotates(p); }) {
    return Def::rotates(p);
  } else {
    return false;
  }
}

// The stream of a slice's draws: the definition's, or 0 for one that draws nothing.
template <class Def>
uint64_t streamOf(const typename Def::Params& p, uint64_t key, uint32_t slice, uint64_t step) {
  if constexpr (Stochastic<Def>) {
    return Def::stream(p, key, slice, step);
  } else {
    (void)p, (void)key, (void)slice, (void)step;
    return 0;
  }
}

template <class Def>
GC_HD bool takesDraws(const typename Def::Params& p) {
  if constexpr (requires { Def::draws(p); }) {
    return Def::draws(p);
  } else {
    return Stochastic<Def>;
  }
}

template <class Def>
inline constexpr bool kChecksWritten = requires(const typename Def::Params& p) { Def::unwrittenMask(p); };

// Elements whose codes are sent for a slice of n: n, or whole blocks when they are rotated.
template <class Def>
GC_HD size_t codedElements(size_t n, const typename Def::Params& p) {
  if constexpr (BlockScaled<Def>) {
    if (rotates<Def>(p)) return (n + Def::block(p) - 1) / Def::block(p) * Def::block(p);
  }
  (void)p;
  return n;
}

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

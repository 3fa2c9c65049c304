// dgc: Deep Gradient Compression (Lin et al. 2018); see dgc.cc for the encoding and
// dgc_math.h for the warm-up schedule. The GPU twin (compress/cuda/sparse_codecs.cu) reads the
// same parameters with these defaults.
#pragma once

#include <cstdint>
#include <memory>

#include "compress/codec.h"

namespace gcagent::compress {

// The defaults (README.md's DDP example, plain SGD at lr 0.5 on 2 nodes x 2 trainers for
// 110 steps, ends within 2 points of uncompressed with them: tests/clients/python/
// test_dgc_defaults.py):
//   ratio 0.001: DGC's 99.9% sparsity.
//   momentum 0: the optimizer keeps its own momentum. Momentum correction replaces the
//     optimizer's: move it here (and set the optimizer's to 0) to get it. Defaulting to 0.9
//     silently turned plain SGD into momentum SGD (10x the step), which the README example
//     did not survive (17% after 10 epochs).
//   warmup_steps 50: DGC's sparsity warm-up (75% -> 99.9% over its first 4 epochs, 4x
//     sparser each), in encodes of a slice since the codec sees no epochs; 50 covers the
//     first 4.5 of the README example's 10 epochs.
inline constexpr double kDgcDefaultRatio = 0.001;
inline constexpr double kDgcDefaultMomentum = 0;
inline constexpr int64_t kDgcDefaultWarmupSteps = 50;

Result<std::unique_ptr<Codec>> makeDgcCodec(const Params& params, const CodecEnv& env);

}  // namespace gcagent::compress

// Deep Gradient Compression's element math (Lin et al. 2018).
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::dgc {

// Momentum correction: the velocity u = m u + g, not g itself, accumulates into v, so what v
// eventually sends carries the momentum a dense optimizer would have applied. Rounded as
// written on both CPU and GPU (nvcc would otherwise fuse the multiply-add) so both give the
// same bits.
GC_HD void momentumStep(float g, float& u, float& v, float m) {
#if defined(__CUDA_ARCH__)
  u = __fadd_rn(__fmul_rn(m, u), g);
#else
  u = m * u + g;
#endif
  v += u;
}

}  // namespace gcagent::compress::dgc

// Every quantizer definition's CPU loops, and the slice statistics, for AVX2 (isa "avx2"),
// through Highway's AVX2 target. GCC inlines a function into another only when the caller is
// compiled for every instruction set the callee is, so the definitions' math must itself be
// AVX2 code here: their
// headers are parsed first inside Highway's AVX2 region, and instantiated with this file's
// own lanes types only (nothing compiled here is shared with the baseline's code).
#include "compress/compll/definition.h"  // what the definitions include: compiled for the baseline

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "compress/compll/cpu/quantizer_kernels_avx2.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#if HWY_TARGET == HWY_AVX2
HWY_BEFORE_NAMESPACE();
#include "compress/compll/definitions.h"
HWY_AFTER_NAMESPACE();

#include "compress/compll/cpu/quantizer-inl.h"
#include "compress/compll/cpu/slice_stats-inl.h"

namespace gcagent::compress::compll {

#define GC_AVX2(Def)                                                                              \
  template <>                                                                                     \
  const KernelsOf<codecs::Def>& avx2Kernels<codecs::Def>() {                      \
    static constexpr KernelsOf<codecs::Def> kKernels = N_AVX2::definitionKernels<codecs::Def>(); \
    return kKernels;                                                                              \
  }
GC_FOR_EACH_CODEC(GC_AVX2)
#undef GC_AVX2

BlockStatsFn avx2BlockStats(unsigned which) {
  static constexpr BlockStatsFn kByWhich[8] = {
      N_AVX2::blockStatsRange<0>, N_AVX2::blockStatsRange<1>, N_AVX2::blockStatsRange<2>, N_AVX2::blockStatsRange<3>,
      N_AVX2::blockStatsRange<4>, N_AVX2::blockStatsRange<5>, N_AVX2::blockStatsRange<6>, N_AVX2::blockStatsRange<7>};
  return kByWhich[which & 7u];
}

}  // namespace gcagent::compress::compll
#endif  // HWY_TARGET == HWY_AVX2

// Every quantizer definition's CPU loops, and the slice statistics, for the build's
// baseline (isa "generic"): Highway's static target, EMU128 on x86-64, or SCALAR where
// Highway finds the compiler's EMU128 broken (compress/CMakeLists.txt leaves every other
// target out of this file).
#include <hwy/highway.h>

#include "compress/compll/cpu/quantizer-inl.h"
#include "compress/compll/cpu/slice_stats-inl.h"
#include "compress/compll/definitions.h"

namespace gcagent::compress::compll {

#define GC_BASELINE(Def)                                                                          \
  template <>                                                                                     \
  const KernelsOf<codecs::Def>& baselineKernels<codecs::Def>() {                  \
    static constexpr KernelsOf<codecs::Def> kKernels = HWY_NAMESPACE::definitionKernels<codecs::Def>(); \
    return kKernels;                                                                              \
  }
GC_FOR_EACH_CODEC(GC_BASELINE)
#undef GC_BASELINE

BlockStatsFn baselineBlockStats(unsigned which) {
  static constexpr BlockStatsFn kByWhich[8] = {
      HWY_NAMESPACE::blockStatsRange<0>, HWY_NAMESPACE::blockStatsRange<1>, HWY_NAMESPACE::blockStatsRange<2>, HWY_NAMESPACE::blockStatsRange<3>,
      HWY_NAMESPACE::blockStatsRange<4>, HWY_NAMESPACE::blockStatsRange<5>, HWY_NAMESPACE::blockStatsRange<6>, HWY_NAMESPACE::blockStatsRange<7>};
  return kByWhich[which & 7u];
}

}  // namespace gcagent::compress::compll

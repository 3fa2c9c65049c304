// qsgd's encoding loop: the AVX2 one (vector splitmix64 draws, levels, signs, residuals)
// against the portable one bit for bit, over random values with signed zeros and
// subnormals, at bucket edges that are not multiples of 8.
#include "compress/qsgd/qsgd_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gcagent::compress::qsgd {
namespace {

#if GC_CPU_X86
std::vector<float> values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = gauss(rng);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 4.0f, -4.0f};
  for (size_t i = 0; i < n; i += 3) v[i] = specials[(i / 3) % 5];
  return v;
}

TEST(QsgdKernelsTest, Avx2EncodeMatchesGeneric) {
  if (!cpu::cpuSupports(cpu::Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  const auto r0 = values(2000, 2);
  for (bool zeros : {false, true}) {
    // A bucket's norm is at least every |x| in it (0 only when all are 0): the tightest
    // such norm, where the largest element reaches `levels` exactly, and a looser one.
    const auto g = zeros ? std::vector<float>(2000, 0.0f) : values(2000, 1);
    float largest = 0.0f;
    for (size_t i = 0; i < g.size(); ++i)
      largest = std::max({largest, std::fabs(g[i]), std::fabs(g[i] + r0[i])});
    for (int32_t levels : {1, 5, 127}) {
      for (float norm : {largest, 2.5f * largest + 1.0f}) {
        if (zeros && norm != 0.0f) continue;
        for (size_t begin : {size_t{0}, size_t{3}, size_t{13}}) {
          for (size_t end : {begin, begin + 1, begin + 7, begin + 8, begin + 29, size_t{1999}}) {
            for (bool feedback : {false, true}) {
              if (zeros && feedback) continue;  // g + r is not all zero
              auto r_generic = r0, r_avx2 = r0;
              std::vector<int8_t> a(2000, 99), b(2000, 99);
              const auto generic =
                  feedback ? kGenericKernels.encode_feedback : kGenericKernels.encode;
              const auto avx2 = feedback ? kAvx2Kernels.encode_feedback : kAvx2Kernels.encode;
              generic(g.data(), feedback ? r_generic.data() : nullptr, a.data(), begin, end, norm,
                      levels, 77);
              avx2(g.data(), feedback ? r_avx2.data() : nullptr, b.data(), begin, end, norm, levels,
                   77);
              ASSERT_EQ(a, b) << begin << ".." << end << " norm " << norm << " levels " << levels
                              << " feedback " << feedback;
              ASSERT_EQ(std::memcmp(r_generic.data(), r_avx2.data(), 4 * r0.size()), 0)
                  << begin << ".." << end << " norm " << norm << " levels " << levels;
            }
          }
        }
      }
    }
  }
}
#endif

}  // namespace
}  // namespace gcagent::compress::qsgd

// terngrad's loops: the AVX2 encoding (vector splitmix64 draws, clipping, the keep test,
// the residual) and block statistics against the portable ones bit for bit, over random values with
// signed zeros, subnormals and values beyond the clipping bound, at lengths and offsets that are
// not multiples of 8.
#include "compress/terngrad/terngrad_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gcagent::compress::terngrad {
namespace {

#if GC_CPU_X86
std::vector<float> values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = gauss(rng);
  const float specials[] = {
      0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -3.0f, 3.0f, 2.5f, -2.5f, 1e-30f};
  for (size_t i = 0; i < n; i += 3) v[i] = specials[(i / 3) % 8];
  return v;
}

bool sameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

TEST(TerngradKernelsTest, Avx2EncodeMatchesGeneric) {
  if (!cpu::cpuSupports(cpu::Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  const auto g = values(3000, 1);
  const auto r0 = values(3000, 2);
  const float inf = std::numeric_limits<float>::infinity();
  const Scaler scalers[] = {{inf, 3.0f}, {2.5f, 2.5f}, {0.5f, 0.5f}, {inf, 0.0f}, {inf, 1e-30f}};
  for (const Scaler q : scalers) {
    for (uint64_t stream : {uint64_t{0}, uint64_t{0x9e3779b97f4a7c15ull}, ~uint64_t{0}}) {
      for (size_t begin : {size_t{0}, size_t{4}, size_t{16}}) {
        for (size_t end : {begin, begin + 1, begin + 7, begin + 8, begin + 13, size_t{2999}}) {
          for (bool feedback : {false, true}) {
            auto r_generic = r0, r_avx2 = r0;
            std::vector<uint8_t> a(760, 0x5a), b(760, 0x5a);
            const auto generic =
                feedback ? kGenericKernels.encode_feedback : kGenericKernels.encode;
            const auto avx2 = feedback ? kAvx2Kernels.encode_feedback : kAvx2Kernels.encode;
            generic(g.data(), feedback ? r_generic.data() : nullptr, a.data(), begin, end, q,
                    stream);
            avx2(g.data(), feedback ? r_avx2.data() : nullptr, b.data(), begin, end, q, stream);
            ASSERT_EQ(a, b) << begin << ".." << end << " bound " << q.bound << " s " << q.s
                            << " stream " << stream << " feedback " << feedback;
            ASSERT_TRUE(sameFloats(r_generic, r_avx2)) << begin << ".." << end;
          }
        }
      }
    }
  }
}
TEST(TerngradKernelsTest, Avx2BlockStatsMatchGeneric) {
  if (!cpu::cpuSupports(cpu::Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  const auto g = values(10 * kStatsBlock, 3);
  const auto r = values(10 * kStatsBlock, 4);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 20; ++n) lengths.push_back(n);
  for (size_t blocks = 1; blocks <= 9; ++blocks)
    for (size_t extra : {size_t{0}, size_t{3}, size_t{4}, size_t{1001}})
      lengths.push_back(blocks * kStatsBlock + extra);
  for (size_t n : lengths) {
    for (bool feedback : {false, true}) {
      const size_t count = (n + kStatsBlock - 1) / kStatsBlock;
      std::vector<BlockStats> a(count + 1, {-1.0, -1.0f}), b(count + 1, {-1.0, -1.0f});
      const auto generic =
          feedback ? kGenericKernels.block_stats_feedback : kGenericKernels.block_stats;
      const auto avx2 = feedback ? kAvx2Kernels.block_stats_feedback : kAvx2Kernels.block_stats;
      generic(g.data(), r.data(), 0, n, a.data());
      avx2(g.data(), r.data(), 0, n, b.data());
      for (size_t k = 0; k < a.size(); ++k) {
        ASSERT_EQ(std::memcmp(&a[k].sum_squares, &b[k].sum_squares, 8), 0)
            << "n=" << n << " block " << k << ": " << a[k].sum_squares << " vs "
            << b[k].sum_squares;
        ASSERT_EQ(a[k].max_magnitude, b[k].max_magnitude) << "n=" << n << " block " << k;
      }
      if (count > 2) {  // from block 2, as a pool chunk starts
        std::vector<BlockStats> c(count), d(count);
        generic(g.data(), r.data(), 2 * kStatsBlock, n, c.data());
        avx2(g.data(), r.data(), 2 * kStatsBlock, n, d.data());
        for (size_t k = 2; k < count; ++k)
          ASSERT_EQ(std::memcmp(&c[k].sum_squares, &d[k].sum_squares, 8), 0) << "n=" << n;
      }
    }
  }
}
#endif

}  // namespace
}  // namespace gcagent::compress::terngrad

// onebit's loops: the AVX2 block sums, encoding and decoding against the portable ones bit for bit,
// on random bit patterns (NaNs, infinities, subnormals, signed zeros) and ordinary values,
// over lengths and block counts that leave partial blocks, groups and bytes.
#include "compress/onebit/onebit_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gcagent::compress::onebit {
namespace {

std::vector<float> values(size_t n, uint64_t seed, bool arbitrary_bits) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    if (arbitrary_bits) {
      const auto bits = static_cast<uint32_t>(rng());
      std::memcpy(&x, &bits, 4);
    } else {
      x = gauss(rng);
    }
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            1e30f,
                            -1e-30f};
  for (size_t i = 0; i < n; i += 5) v[i] = specials[(i / 5) % 6];
  return v;
}

bool sameBits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

bool sameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && !sameBits(&a[i], &b[i], 4)) return false;
  return true;
}

#if GC_CPU_X86
#define SKIP_WITHOUT_AVX2()               \
  if (!cpu::cpuSupports(cpu::Isa::kAvx2)) \
  GTEST_SKIP() << "this CPU lacks AVX2: only the generic loops can run here"

std::vector<size_t> lengths() {
  std::vector<size_t> out;
  for (size_t n = 0; n <= 40; ++n) out.push_back(n);
  for (size_t blocks = 1; blocks <= 9; ++blocks)
    for (size_t extra : {size_t{0}, size_t{3}, size_t{8}, size_t{1001}})
      out.push_back(blocks * kSumBlock + extra);
  return out;
}

TEST(OnebitKernelsTest, Avx2BlockSumsMatchGeneric) {
  SKIP_WITHOUT_AVX2();
  for (bool arbitrary : {false, true}) {
    const auto g = values(10 * kSumBlock, 1, arbitrary);
    const auto e = values(10 * kSumBlock, 2, false);
    for (size_t n : lengths()) {
      const size_t blocks = (n + kSumBlock - 1) / kSumBlock;
      std::vector<double> a(blocks + 1, -1.0), b(blocks + 1, -1.0);
      kGenericKernels.block_sums(g.data(), e.data(), 0, n, a.data());
      kAvx2Kernels.block_sums(g.data(), e.data(), 0, n, b.data());
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_TRUE((std::isnan(a[k]) && std::isnan(b[k])) || sameBits(&a[k], &b[k], 8))
            << "n=" << n << " block " << k << ": " << a[k] << " vs " << b[k];
      // A range starting mid-slice, as a pool chunk does.
      if (blocks > 2) {
        std::vector<double> c(blocks, -1.0), d(blocks, -1.0);
        kGenericKernels.block_sums(g.data(), e.data(), 2 * kSumBlock, n, c.data());
        kAvx2Kernels.block_sums(g.data(), e.data(), 2 * kSumBlock, n, d.data());
        // A NaN's payload depends on the operand order of the adds, which the compiler may
        // pick (it differs between optimisation levels): any NaN matches any NaN.
        for (size_t k = 0; k < c.size(); ++k)
          ASSERT_TRUE((std::isnan(c[k]) && std::isnan(d[k])) || sameBits(&c[k], &d[k], 8))
              << "n=" << n << " from block 2, block " << k << ": " << c[k] << " vs " << d[k];
      }
    }
  }
}

TEST(OnebitKernelsTest, Avx2EncodeMatchesGeneric) {
  SKIP_WITHOUT_AVX2();
  for (bool arbitrary : {false, true}) {
    const auto g = values(5000, 3, arbitrary);
    const auto e0 = values(5000, 4, false);
    for (float scale : {0.0f, 0.75f, std::numeric_limits<float>::denorm_min()}) {
      for (size_t begin : {size_t{0}, size_t{8}, size_t{32}}) {
        for (size_t end : {begin, begin + 1, begin + 7, begin + 8, begin + 33, begin + 4999 - 32}) {
          auto e_generic = e0, e_avx2 = e0;
          std::vector<uint8_t> a(700, 0xa5), b(700, 0xa5);
          kGenericKernels.encode(g.data(), e_generic.data(), a.data(), begin, end, scale);
          kAvx2Kernels.encode(g.data(), e_avx2.data(), b.data(), begin, end, scale);
          ASSERT_EQ(a, b) << begin << ".." << end << " scale " << scale;
          ASSERT_TRUE(sameFloats(e_generic, e_avx2)) << begin << ".." << end << " scale " << scale;
        }
      }
    }
  }
}
TEST(OnebitKernelsTest, Avx2DecodeAddMatchesGeneric) {
  SKIP_WITHOUT_AVX2();
  std::mt19937_64 rng(6);
  std::vector<uint8_t> bits(700);
  for (auto& b : bits) b = static_cast<uint8_t>(rng());
  const auto acc0 = values(5600, 7, true);  // NaNs, infinities, subnormals, signed zeros
  for (float scale : {0.0f, 0.75f, std::numeric_limits<float>::denorm_min()}) {
    for (size_t begin : {size_t{0}, size_t{8}, size_t{32}}) {
      for (size_t end : {begin, begin + 1, begin + 7, begin + 8, begin + 33, size_t{5555}}) {
        auto a = acc0, b = acc0;
        kGenericKernels.decode_add(bits.data(), a.data(), begin, end, scale);
        kAvx2Kernels.decode_add(bits.data(), b.data(), begin, end, scale);
        ASSERT_TRUE(sameFloats(a, b)) << begin << ".." << end << " scale " << scale;
      }
    }
  }
}
#endif

}  // namespace
}  // namespace gcagent::compress::onebit

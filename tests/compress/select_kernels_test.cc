// The sparse codecs' selection passes: the AVX2 loops against the portable ones bit for bit
// (indices, counts and updated state) on random bit patterns, which hold NaNs, infinities,
// subnormals and signed zeros, at lengths and offsets that are not multiples of 8; and the
// portable loops against their definition.
#include "compress/sparse/select_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compress/codecs/dgc.h"
#include "compress/compll/kernels.h"
#include "compress/sparse/select.h"

namespace gcagent::compress::sparse {
namespace {

std::vector<float> randomBits(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    // Half arbitrary patterns, half ordinary magnitudes near the cuts tried below.
    uint32_t bits = static_cast<uint32_t>(rng());
    if (bits & 1) bits = (bits & 0x807fffffu) | (static_cast<uint32_t>(120 + rng() % 16) << 23);
    std::memcpy(&x, &bits, 4);
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::nanf(""),
                            std::numeric_limits<float>::denorm_min(),
                            1.0f,
                            -1.0f};
  for (size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % 8];
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0) return false;
  return true;
}

std::vector<uint32_t> byDefinition(const std::vector<float>& x, size_t begin, size_t end,
                                   uint32_t key) {
  std::vector<uint32_t> out;
  for (size_t i = begin; i < end; ++i)
    if (magnitudeKey(x[i]) >= key) out.push_back(static_cast<uint32_t>(i));
  return out;
}

const uint32_t kKeys[] = {0u,          1u,          0x3f000000u, 0x3f800000u,
                          0x43000000u, 0x7f800000u, 0x7fc00000u, 0x7fffffffu};

struct Span {
  size_t begin, end;
};

std::vector<Span> spans() {
  std::vector<Span> out;
  for (size_t n = 0; n <= 70; ++n) out.push_back({0, n});
  for (size_t begin : {1, 5, 8, 13, 32}) out.push_back({begin, begin + 333});
  out.push_back({16, 40000});
  return out;
}

std::vector<uint32_t> run(size_t (*fn)(const float*, size_t, size_t, uint32_t, uint32_t*),
                          const std::vector<float>& x, Span s, uint32_t key) {
  std::vector<uint32_t> out(s.end - s.begin);
  out.resize(fn(x.data(), s.begin, s.end, key, out.data()));
  return out;
}

TEST(SelectKernelsTest, GenericCollectMatchesTheDefinition) {
  const auto x = randomBits(40016, 1);
  for (Span s : spans())
    for (uint32_t key : kKeys)
      ASSERT_EQ(run(kGenericKernels.collect, x, s, key), byDefinition(x, s.begin, s.end, key))
          << s.begin << ".." << s.end << " key " << key;
}

#if GC_CPU_X86
#define SKIP_WITHOUT_AVX2()               \
  if (!cpu::cpuSupports(cpu::Isa::kAvx2)) \
  GTEST_SKIP() << "this CPU lacks AVX2: only the generic loops can run here"

TEST(SelectKernelsTest, Avx2CollectMatchesGeneric) {
  SKIP_WITHOUT_AVX2();
  const auto x = randomBits(40016, 2);
  for (Span s : spans())
    for (uint32_t key : kKeys)
      ASSERT_EQ(run(kAvx2Kernels.collect, x, s, key), run(kGenericKernels.collect, x, s, key))
          << s.begin << ".." << s.end << " key " << key;
}

// dgc's pass, made by CompLL from its definition: the AVX2 loop against the baseline's, and
// both against the momentum step written out here (u = m u + g, v += u, each rounded).
TEST(SelectKernelsTest, Avx2DgcPassMatchesGenericAndTheMomentumStep) {
  SKIP_WITHOUT_AVX2();
  const auto g = randomBits(40016, 5);
  const auto u0 = randomBits(40016, 6);
  const auto v0 = randomBits(40016, 7);
  const auto generic = compll::baselineKernels<codecs::Dgc>().update_collect;
  const auto avx2 = compll::avx2Kernels<codecs::Dgc>().update_collect;
  for (Span s : spans()) {
    for (uint32_t key : kKeys) {
      for (float m : {0.0f, 0.9f}) {
        codecs::Dgc::Params p{};
        p.momentum = m;
        auto u_generic = u0, v_generic = v0, u_avx2 = u0, v_avx2 = v0;
        std::vector<uint32_t> a(s.end - s.begin), b(s.end - s.begin);
        a.resize(generic(g.data(), v_generic.data(), u_generic.data(), s.begin, s.end, p, key, a.data()));
        b.resize(avx2(g.data(), v_avx2.data(), u_avx2.data(), s.begin, s.end, p, key, b.data()));
        ASSERT_EQ(a, b) << s.begin << ".." << s.end << " key " << key << " m " << m;
        ASSERT_TRUE(sameBits(u_generic, u_avx2)) << s.begin << ".." << s.end;
        ASSERT_TRUE(sameBits(v_generic, v_avx2)) << s.begin << ".." << s.end;
        ASSERT_EQ(a, byDefinition(v_generic, s.begin, s.end, key));
        for (size_t i = s.begin; i < s.end; ++i) {
          const float u = m * u0[i] + g[i];  // built with -ffp-contract=off: two roundings
          ASSERT_TRUE(sameBits({u, v0[i] + u}, {u_generic[i], v_generic[i]})) << i;
        }
      }
    }
  }
}
#endif

// ---- The selection helpers built on the passes.

TEST(SelectTest, KthLargestKeyMatchesASortBelowAndAboveTheBucketPath) {
  std::mt19937_64 rng(9);
  for (size_t count : {1, 2, 17, 300, 1023, 1024, 2048, 5000, 40000}) {
    // 0: few distinct keys, many ties; 1: any keys; 2: keys that differ in the low bits only.
    for (int spread : {0, 1, 2}) {
      std::vector<uint32_t> keys(count);
      for (auto& key : keys) {
        const auto bits = static_cast<uint32_t>(rng());
        key = spread == 0   ? 0x3f000000u + bits % 5 * 0x80000u
              : spread == 1 ? bits & 0x7fffffffu
                            : 0x3f000000u + bits % 3000;
      }
      auto sorted = keys;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      for (size_t k : {size_t{1}, count / 3 + 1, count}) {
        auto work = keys;
        const KthKey kth = kthLargestKey(work.data(), count, k);
        ASSERT_EQ(kth.key, sorted[k - 1]) << "count " << count << " k " << k;
        const auto greater = static_cast<size_t>(
            std::count_if(keys.begin(), keys.end(), [&](uint32_t key) { return key > kth.key; }));
        ASSERT_EQ(kth.greater, greater) << "count " << count << " k " << k;
      }
    }
  }
}

TEST(SelectTest, RankedKeyMatchesASort) {
  std::mt19937_64 rng(10);
  for (size_t count : {1, 5, 16, 17, 400, 4096}) {
    std::vector<uint32_t> keys(count);
    for (auto& key : keys) key = static_cast<uint32_t>(rng() % 64);  // ties
    auto sorted = keys;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (size_t rank : {size_t{1}, size_t{3}, size_t{16}, size_t{17}, count}) {
      if (rank > count) continue;
      auto work = keys;
      ASSERT_EQ(rankedKey(work.data(), count, rank), sorted[rank - 1])
          << "count " << count << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace gcagent::compress::sparse

// What the host's non-finite check costs the encode it guards (LocalCoder::encode: each coded
// slice is checked just before its encode, so an fp16 overflow step never reaches a
// residual). Times, over a gradient of --elements floats in slices of --slice (the agent's
// default 40000), the codec's encodes alone, each encode after the check of its slice (what
// the agent does), the checks alone, and each encode followed by a check of its slice's new
// residual (cheaper, but too late to keep the residual as it was). Best of 7 runs each.
//
//   build/release/bench/gcagent_non_finite_bench [--codec=2bit] [--elements=67108864] [--slice=40000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "agent/coding/slice_math.h"
#include "compress/registry.h"

namespace {

template <class Fn>
double bestOf7(Fn&& fn) {
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string codec_name = "2bit";
  size_t n = size_t{64} << 20, slice = 40000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--codec=")) codec_name = arg.substr(8);
    else if (arg.starts_with("--elements=")) n = std::strtoull(argv[i] + 11, nullptr, 10);
    else if (arg.starts_with("--slice=")) slice = std::strtoull(argv[i] + 8, nullptr, 10);
    else return std::fprintf(stderr, "unknown flag %s\n", argv[i]), 2;
  }
  auto made = gcagent::compress::makeCodec(codec_name, {});
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().toString().c_str()), 1;
  const auto& codec = *made;
  std::vector<float> g(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : g) x = normal(rng);
  std::vector<float> state(codec->stateElements(slice) * ((n + slice - 1) / slice), 0.0f);
  std::vector<std::byte> out(codec->maxEncodedBytes(slice));
  bool finite = true;
  auto pass = [&](bool check_before, bool check_after) {
    for (size_t b = 0, s = 0; b < n; b += slice, ++s) {
      const size_t m = std::min(slice, n - b);
      float* r = state.data() + s * codec->stateElements(slice);
      if (check_before) finite &= gcagent::agent::allFinite(g.data() + b, m);
      (void)codec->encode({g.data() + b, m}, {r, codec->stateElements(m)}, {out.data(), codec->maxEncodedBytes(m)},
                          {0, static_cast<uint32_t>(s), 0});
      if (check_after) finite &= gcagent::agent::allFinite(r, codec->stateElements(m));
    }
  };
  const double plain = bestOf7([&] { pass(false, false); });
  const double guarded = bestOf7([&] { pass(true, false); });
  const double checks = bestOf7([&] {
    for (size_t b = 0; b < n; b += slice) finite &= gcagent::agent::allFinite(g.data() + b, std::min(slice, n - b));
  });
  const double after = bestOf7([&] { pass(false, true); });
  std::printf("%s, %zu elements in slices of %zu (best of 7, ms): encodes %.2f; check, then encode (the agent) %.2f "
              "(%.2fx); checks alone %.2f; encode, then check the residual %.2f (%.2fx)%s\n",
              codec_name.c_str(), n, slice, plain * 1e3, guarded * 1e3, guarded / plain, checks * 1e3, after * 1e3,
              after / plain, finite ? "" : " (the input was not finite?)");
}

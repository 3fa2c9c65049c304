#include "compress/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace gcagent::compress {
namespace {

TEST(RegistryTest, ListsEveryCodecOnce) {
  std::set<std::string> names;
  for (const auto& info : codecList()) {
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << info.name;
    EXPECT_FALSE(info.summary.empty()) << info.name;
  }
  // The codecs peers and configs already name stay; a new one needs no line here.
  for (const char* name : {"none", "fp16", "bf16", "2bit", "1bit", "onebit", "terngrad", "topk", "dgc", "threshold",
                           "randomk", "qsgd", "int8"})
    EXPECT_EQ(names.count(name), 1u) << name;
}

TEST(RegistryTest, EveryCodecBuildsWithDefaults) {
  for (const auto& info : codecList()) {
    auto codec = makeCodec(info.name);
    ASSERT_TRUE(codec.ok()) << info.name << ": " << codec.status().toString();
    EXPECT_EQ((*codec)->name(), info.name);
  }
}

TEST(RegistryTest, UnknownCodecIsNamedWithTheKnownOnes) {
  auto codec = makeCodec("3bit");
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(codec.status().message().rfind("unknown codec '3bit' (known: none, fp16, bf16, ", 0), 0u)
      << codec.status().message();
  EXPECT_NE(codec.status().message().find(", 2bit, "), std::string::npos) << codec.status().message();
}

TEST(RegistryTest, BadParametersAreRejected) {
  struct Case {
    const char* codec;
    Params params;
    const char* needle;
  };
  const Case cases[] = {
      {"2bit", {{"threshold", "-1"}}, "'threshold' = -1 is outside"},
      {"2bit", {{"threshold", "x"}}, "not a finite number"},
      {"1bit", {{"bits", "2"}}, "unknown parameter 'bits'"},
      {"fp16", {{"error_feedback", "maybe"}}, "not a boolean"},
  };
  for (const auto& c : cases) {
    auto codec = makeCodec(c.codec, c.params);
    ASSERT_FALSE(codec.ok()) << c.codec;
    EXPECT_NE(codec.status().message().find(c.needle), std::string::npos) << codec.status().message();
    EXPECT_NE(codec.status().message().find(c.codec), std::string::npos) << codec.status().message();
  }
}

}  // namespace
}  // namespace gcagent::compress

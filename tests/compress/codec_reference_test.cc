#include "compress/codec_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace gcagent::compress {
namespace {

const CodecInfo& codecNamed(std::string_view name) {
  for (const CodecInfo& c : codecList())
    if (c.name == name) return c;
  ADD_FAILURE() << "no codec " << name;
  return codecList().front();
}

TEST(CodecReferenceTest, TwoBitDescribesItsThresholdAsMxnetDefinesIt) {
  const auto params = codecParams(codecNamed("2bit"));
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].key, "threshold");
  EXPECT_EQ(params[0].type, "real");
  EXPECT_EQ(params[0].default_text, "0.5");
  EXPECT_EQ(params[0].range, "(0, inf]");
  EXPECT_EQ(params[1].key, "error_feedback");
  EXPECT_EQ(params[1].type, "boolean");
  EXPECT_EQ(params[1].default_text, "true");
}

TEST(CodecReferenceTest, DgcNamesTheMomentumToSetOnTheOptimizer) {
  const auto params = codecParams(codecNamed("dgc"));
  const auto it = std::find_if(params.begin(), params.end(), [](const ParamInfo& p) { return p.key == "momentum"; });
  ASSERT_NE(it, params.end());
  EXPECT_EQ(it->default_text, "0");
  EXPECT_EQ(it->range, "[0, 1)");
  EXPECT_NE(it->help.find("optimizer's momentum to 0"), std::string::npos) << it->help;
}

// Every parameter the reference lists has a meaning, and its default is accepted when given
// explicitly: the reference and the factories agree.
TEST(CodecReferenceTest, EveryListedParameterHasHelpAndItsDefaultIsAccepted) {
  for (const CodecInfo& codec : codecList()) {
    for (const ParamInfo& p : codecParams(codec)) {
      EXPECT_FALSE(p.help.empty()) << codec.name << "." << p.key;
      auto made = makeCodec(codec.name, Params{{p.key, p.default_text}});
      EXPECT_TRUE(made.ok()) << codec.name << "." << p.key << " = " << p.default_text << ": "
                             << made.status().message();
    }
  }
}

TEST(CodecReferenceTest, TheTableHasARowPerParameterAndOneForCodecsWithout) {
  const std::string table = codecReferenceMarkdown();
  EXPECT_NE(table.find("| `none`: fp32 passthrough"), std::string::npos) << table;  // no row of its own
  EXPECT_NE(table.find("| `2bit`: MXNet 2-bit threshold quantizer with residual | `threshold` | real | `0.5` | (0, inf] |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("|  | `error_feedback` | boolean | `true` |"), std::string::npos);
}

}  // namespace
}  // namespace gcagent::compress

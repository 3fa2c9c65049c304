#include "compress/params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace gcagent::compress {
namespace {

TEST(ParamsTest, DefaultsApplyWhenKeysAreAbsent) {
  Params p;
  ParamReader r("x", p);
  EXPECT_EQ(r.real("threshold", 0.5, Range::above(0)), 0.5);
  EXPECT_EQ(r.integer("levels", 16, Range::closed(1, 255)), 16);
  EXPECT_EQ(r.seed("seed", 7), 7u);
  EXPECT_TRUE(r.boolean("error_feedback", true));
  EXPECT_TRUE(r.finish().ok());
}

TEST(ParamsTest, ValuesAreParsed) {
  Params p{{"threshold", "0.25"}, {"levels", "4"}, {"seed", "0x10"}, {"error_feedback", "false"}};
  ParamReader r("x", p);
  EXPECT_EQ(r.real("threshold", 0.5, Range::above(0)), 0.25);
  EXPECT_EQ(r.integer("levels", 16, Range::closed(1, 255)), 4);
  EXPECT_EQ(r.seed("seed", 7), 16u);
  EXPECT_FALSE(r.boolean("error_feedback", true));
  EXPECT_TRUE(r.finish().ok());
}

TEST(ParamsTest, OutOfRangeNamesCodecKeyValueAndRange) {
  Params p{{"threshold", "0"}};
  ParamReader r("2bit", p);
  r.real("threshold", 0.5, Range::above(0));
  Status s = r.finish();
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "codec '2bit': parameter 'threshold' = 0 is outside (0, inf]");
}

TEST(ParamsTest, MalformedNumbersAreRejected) {
  for (const char* text : {"", "abc", "1.5x", "nan", "inf", "1e999"}) {
    Params p{{"threshold", text}};
    ParamReader r("2bit", p);
    r.real("threshold", 0.5, Range::any());
    Status s = r.finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find("is not a finite number"), std::string::npos) << s.message();
  }
  Params p{{"levels", "2.5"}, {"seed", "-1"}, {"on", "yes"}};
  ParamReader r("qsgd", p);
  r.integer("levels", 1, Range::any());
  EXPECT_EQ(r.finish().message(), "codec 'qsgd': parameter 'levels' = '2.5' is not an integer");
  ParamReader r2("qsgd", p);
  r2.seed("seed", 1);
  EXPECT_NE(r2.finish().message().find("not an unsigned 64-bit integer"), std::string::npos);
  ParamReader r3("qsgd", p);
  r3.boolean("on", false);
  EXPECT_NE(r3.finish().message().find("is not a boolean"), std::string::npos);
}

// What MXNet 1.9.1's set_gradient_compression answered for each text (run by hand against
// the PyPI wheel): "Out of range value for threshold" for the first list, accepted for the
// second.
TEST(ParamsTest, FloatParametersRefuseWhatNoNormalFloatHoldsAsMxnetDoes) {
  for (const char* text : {"1e-50", "1e-45", "1e-40", "1e-38", "1e39", "-1e-40", "3.5e38"}) {
    Params p{{"threshold", text}};
    ParamReader r("1bit", p);
    EXPECT_EQ(r.real32("threshold", 0.5f, Range::any()), 0.5f) << text;
    Status s = r.finish();
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << text;
    EXPECT_EQ(s.message(), std::string("codec '1bit': parameter 'threshold' = ") + text +
                               " is out of range for a float (its magnitude must lie in [1.17549e-38, 3.40282e+38])");
  }
  for (const auto& [text, want] : std::vector<std::pair<const char*, float>>{
           {"1.17549435e-38", 1.17549435e-38f}, {"1.2e-38", 1.2e-38f}, {"3.4e38", 3.4e38f}, {"0.5", 0.5f}, {"0", 0.0f},
           {"-0.25", -0.25f}}) {
    Params p{{"threshold", text}};
    ParamReader r("1bit", p);
    EXPECT_EQ(r.real32("threshold", 0.5f, Range::any()), want) << text;
    EXPECT_TRUE(r.finish().ok()) << text;
  }
}

TEST(ParamsTest, FloatParametersKeepTheRangeCheck) {
  Params p{{"threshold", "0"}};
  ParamReader r("2bit", p);
  r.real32("threshold", 0.5f, Range::above(0));
  EXPECT_EQ(r.finish().message(), "codec '2bit': parameter 'threshold' = 0 is outside (0, inf]");
}

TEST(ParamsTest, UnknownKeyIsNamedWithTheKnownOnes) {
  Params p{{"threshold", "0.5"}, {"treshold", "1"}};
  ParamReader r("2bit", p);
  r.real("threshold", 0.5, Range::above(0));
  EXPECT_EQ(r.finish().message(), "codec '2bit': unknown parameter 'treshold' (known: threshold)");
}

TEST(ParamsTest, RangeBoundsAreExact) {
  EXPECT_TRUE(Range::openClosed(0, 1).contains(1));
  EXPECT_FALSE(Range::openClosed(0, 1).contains(0));
  EXPECT_TRUE(Range::closed(0, 1).contains(0));
  EXPECT_FALSE(Range::open(0, 1).contains(1));
  EXPECT_FALSE(Range::any().contains(std::nan("")));
}

}  // namespace
}  // namespace gcagent::compress

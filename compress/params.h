// Reads a codec's parameters with defaults and ranges, collecting the first error and
// rejecting keys nobody asked for:
//   ParamReader r("2bit", params);
//   float t = r.real("threshold", 0.5, Range::above(0));
//   GC_RETURN_IF_ERROR(r.finish());
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "compress/codec.h"

namespace gcagent::compress {

// The meaning of every codec's error_feedback parameter, for the codec reference.
inline constexpr std::string_view kErrorFeedbackHelp =
    "keep what the encoding lost in a residual and add it to the next gradient";

struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;

  static Range any() { return {}; }
  static Range above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
  static Range atLeast(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }
  // (lo, hi]
  static Range openClosed(double lo, double hi) { return {lo, hi, true, false}; }
  // (lo, hi)
  static Range open(double lo, double hi) { return {lo, hi, true, true}; }

  bool contains(double v) const;
  std::string describe() const;  // "(0, 1]"
};

class ParamReader {
 public:
  ParamReader(std::string_view codec, const Params& params) : codec_(codec), params_(params) {}

  // `help`: one line for the codec reference (gcagent --list-codecs).
  double real(std::string_view key, double fallback, Range range, std::string_view help = {});
  // A parameter the codec keeps as a float: besides real()'s checks, a nonzero value that
  // is no normal float (1e-50, 1e-40 round to zero or a subnormal; 1e39 overflows) is
  // refused, as MXNet's parameter parser refuses it ("Out of range value for threshold").
  float real32(std::string_view key, float fallback, Range range, std::string_view help = {});
  int64_t integer(std::string_view key, int64_t fallback, Range range, std::string_view help = {});
  // A block size of the block-scaled codecs: a power of two in [32, 256].
  uint32_t blockSize(std::string_view key, uint32_t fallback, std::string_view help = {});
  uint64_t seed(std::string_view key, uint64_t fallback, std::string_view help = {});
  bool boolean(std::string_view key, bool fallback, std::string_view help = {});

  // The first parse or range error, else an error naming any key that was never read.
  Status finish() const;

 private:
  const std::string* lookup(std::string_view key);
  void describe(std::string_view key, std::string_view type, std::string default_text, std::string range,
                std::string_view help);
  void fail(Status s);

  std::string codec_;
  const Params& params_;
  std::set<std::string, std::less<>> known_;
  Status first_error_;
};

// One parameter as a factory reads it: the codec reference is what the code does.
struct ParamInfo {
  std::string key;
  std::string type;  // real, integer, seed, boolean
  std::string default_text;
  std::string range;  // "(0, 1]"; empty: any value of the type
  std::string help;
};

// While alive, records every parameter a ParamReader on this thread reads (the first read
// of each key), so a factory called with no parameters describes its own.
class ParamRecorder {
 public:
  ParamRecorder();
  ~ParamRecorder();
  ParamRecorder(const ParamRecorder&) = delete;
  ParamRecorder& operator=(const ParamRecorder&) = delete;
  const std::vector<ParamInfo>& params() const { return params_; }

 private:
  friend class ParamReader;
  std::vector<ParamInfo> params_;
  ParamRecorder* outer_;
};

}  // namespace gcagent::compress

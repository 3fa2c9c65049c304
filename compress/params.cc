#include "compress/params.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/str_cat.h"

namespace gcagent::compress {
namespace {
thread_local ParamRecorder* recorder = nullptr;

// A range for the reference: none for "any value".
std::string rangeText(const Range& r) {
  return std::isinf(r.lo) && std::isinf(r.hi) ? std::string() : r.describe();
}
}  // namespace

ParamRecorder::ParamRecorder() : outer_(recorder) { recorder = this; }
ParamRecorder::~ParamRecorder() { recorder = outer_; }

void ParamReader::describe(std::string_view key, std::string_view type, std::string default_text, std::string range,
                           std::string_view help) {
  if (recorder == nullptr) return;
  for (const ParamInfo& p : recorder->params_)
    if (p.key == key) return;
  recorder->params_.push_back({std::string(key), std::string(type), std::move(default_text), std::move(range),
                               std::string(help)});
}

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string Range::describe() const {
  return strCat(lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]");
}

const std::string* ParamReader::lookup(std::string_view key) {
  known_.emplace(key);
  auto it = params_.find(key);
  return it == params_.end() ? nullptr : &it->second;
}

void ParamReader::fail(Status s) {
  if (first_error_.ok()) first_error_ = std::move(s);
}

double ParamReader::real(std::string_view key, double fallback, Range range, std::string_view help) {
  describe(key, "real", strCat(fallback), rangeText(range), help);
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    fail(Status::invalidArgument(
        strCat("codec '", codec_, "': parameter '", key, "' = '", *text, "' is not a finite number")));
    return fallback;
  }
  if (!range.contains(v)) {
    fail(Status::outOfRange(strCat("codec '", codec_, "': parameter '", key, "' = ", *text,
                                   " is outside ", range.describe())));
    return fallback;
  }
  return v;
}

float ParamReader::real32(std::string_view key, float fallback, Range range, std::string_view help) {
  describe(key, "real", strCat(fallback), rangeText(range), help);
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  const Status before = first_error_;
  const double wide = real(key, fallback, range, help);
  if (!before.ok() || !first_error_.ok()) return fallback;  // real() named the problem
  // strtof rounds as MXNet's parser does: 1.17549435e-38 is FLT_MIN, a normal float.
  const float v = std::strtof(text->c_str(), nullptr);
  if (wide != 0 && !std::isnormal(v)) {
    fail(Status::outOfRange(strCat("codec '", codec_, "': parameter '", key, "' = ", *text,
                                   " is out of range for a float (its magnitude must lie in [",
                                   std::numeric_limits<float>::min(), ", ", std::numeric_limits<float>::max(),
                                   "])")));
    return fallback;
  }
  return v;
}

int64_t ParamReader::integer(std::string_view key, int64_t fallback, Range range, std::string_view help) {
  describe(key, "integer", strCat(fallback), rangeText(range), help);
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno == ERANGE) {
    fail(Status::invalidArgument(
        strCat("codec '", codec_, "': parameter '", key, "' = '", *text, "' is not an integer")));
    return fallback;
  }
  if (!range.contains(static_cast<double>(v))) {
    fail(Status::outOfRange(strCat("codec '", codec_, "': parameter '", key, "' = ", *text,
                                   " is outside ", range.describe())));
    return fallback;
  }
  return v;
}

uint32_t ParamReader::blockSize(std::string_view key, uint32_t fallback, std::string_view help) {
  const Status before = first_error_;
  const int64_t v = integer(key, fallback, Range::closed(32, 256), help);
  if (!before.ok() || !first_error_.ok()) return fallback;
  if ((v & (v - 1)) != 0) {
    fail(Status::outOfRange(
        strCat("codec '", codec_, "': parameter '", key, "' = ", v, " is not a power of two (32, 64, 128 or 256)")));
    return fallback;
  }
  return static_cast<uint32_t>(v);
}

uint64_t ParamReader::seed(std::string_view key, uint64_t fallback, std::string_view help) {
  describe(key, "seed", strCat(fallback), "[0, 2^64)", help);
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text->c_str(), &end, 0);
  if (text->empty() || (*text)[0] == '-' || *end != '\0' || errno == ERANGE) {
    fail(Status::invalidArgument(strCat("codec '", codec_, "': parameter '", key, "' = '", *text,
                                        "' is not an unsigned 64-bit integer")));
    return fallback;
  }
  return v;
}

bool ParamReader::boolean(std::string_view key, bool fallback, std::string_view help) {
  describe(key, "boolean", fallback ? "true" : "false", "", help);
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  if (*text == "1" || *text == "true") return true;
  if (*text == "0" || *text == "false") return false;
  fail(Status::invalidArgument(strCat("codec '", codec_, "': parameter '", key, "' = '", *text,
                                      "' is not a boolean (true, false, 1, 0)")));
  return fallback;
}

Status ParamReader::finish() const {
  if (!first_error_.ok()) return first_error_;
  for (const auto& [key, value] : params_) {
    if (known_.count(key) != 0) continue;
    std::string list;
    for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
    return Status::invalidArgument(strCat("codec '", codec_, "': unknown parameter '", key,
                                          "' (known: ", list.empty() ? "none" : list, ")"));
  }
  return {};
}

}  // namespace gcagent::compress

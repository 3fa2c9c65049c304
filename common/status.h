// Errors as values: Status for operations without a result, Result<T> for the rest.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gcagent {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // a caller passed a value that can never be valid
  kOutOfRange,         // a value outside its documented range
  kDataLoss,           // an encoded buffer or message is truncated or corrupted
  kNotFound,           // a name that is not registered
  kFailedPrecondition, // the object is not in a state that allows the call
  kResourceExhausted,  // a memory or size budget would be exceeded
  kUnavailable,        // a peer or device cannot be reached
  kDeadlineExceeded,   // a timeout expired
  kInternal,           // a broken invariant: a bug
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status outOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status dataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status failedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status resourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status deadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "data_loss: 2bit: encoded buffer holds 7 bytes, expected 8"
  std::string toString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status okStatus() { return {}; }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}           // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; an ok Status when a value is held.
  Status status() const { return ok() ? Status{} : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gcagent

#define GC_CONCAT_INNER(a, b) a##b
#define GC_CONCAT(a, b) GC_CONCAT_INNER(a, b)

#define GC_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::gcagent::Status gc_status_ = (expr);           \
    if (!gc_status_.ok()) return gc_status_;         \
  } while (0)

#define GC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define GC_ASSIGN_OR_RETURN(lhs, expr) \
  GC_ASSIGN_OR_RETURN_IMPL(GC_CONCAT(gc_result_, __LINE__), lhs, expr)

// Status and Result<T>: Kiln's error model. No exceptions cross a public
// boundary; every fallible function returns one of these.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,   // caller passed something wrong (shape, dtype, option)
  kNotFound,          // file, input, op or attribute does not exist
  kUnimplemented,     // valid input Kiln does not support (yet)
  kIoError,           // OS-level read/write failure
  kCorrupt,           // a file failed verification (checksum, bounds)
  kOutOfRange,        // an index or size outside its bounds
  kInternal,          // a Kiln bug
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>"
  std::string ToString() const;
  // Prefixes context to the message ("while loading x: ...").
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}    // NOLINT(google-explicit-constructor)
  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

namespace strcat_internal {
// Appends `v` as `std::ostream << v` would write it: strings and characters
// as they are, integers in decimal, floating point as %g (the stream's
// default, 6 significant digits), anything else through a stream. Strings
// are built on every planning path (names, layout keys), so the common
// kinds skip the stream and its locale.
template <typename T>
void Append(std::string& out, const T& v) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> || std::is_same_v<U, unsigned char>) {
    out.push_back(static_cast<char>(v));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out.append(std::string_view(v));
  } else if constexpr (std::is_integral_v<U> && !std::is_same_v<U, bool>) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  } else if constexpr (std::is_floating_point_v<U>) {
    char buf[48];
    const int n = std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
    if (n > 0) out.append(buf, static_cast<std::size_t>(n) < sizeof(buf) ? static_cast<std::size_t>(n) : sizeof(buf) - 1);
  } else {
    std::ostringstream os;
    os << v;
    out += os.str();
  }
}
}  // namespace strcat_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strcat_internal::Append(out, args), ...);
  return out;
}

template <typename... Args>
Status Error(StatusCode code, const Args&... args) {
  return Status(code, StrCat(args...));
}

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

#define KILN_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::kiln::Status kiln_status_ = (expr);          \
    if (!kiln_status_.ok()) return kiln_status_;   \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_result_, __LINE__), lhs, expr)

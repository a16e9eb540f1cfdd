// Typed errors. Every failure a user can cause is an edgetrain::Error with a code and a message
// that names the file, node, input or parameter involved.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace edgetrain {

enum class ErrorCode {
  kInvalidArgument,   // bad feed, bad attribute value, bad option
  kInvalidModel,      // malformed, truncated or inconsistent model file
  kNotImplemented,    // unsupported operator, dtype or attribute combination
  kOutOfRange,        // index out of bounds (Gather, Slice, ...)
  kIoError,           // file missing, unreadable, unwritable
  kResourceExhausted, // a tensor larger than the allocation limit
  kInternal,          // a bug in edgetrain
};

const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
template <typename... Args>
std::string Concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

template <typename... Args>
[[noreturn]] void Fail(ErrorCode code, const Args&... args) {
  throw Error(code, detail::Concat(args...));
}

}  // namespace edgetrain

// ET_CHECK(cond, code, message parts...) throws edgetrain::Error when cond is false.
#define ET_CHECK(cond, code, ...)                      \
  do {                                                 \
    if (!(cond)) ::edgetrain::Fail((code), __VA_ARGS__); \
  } while (0)

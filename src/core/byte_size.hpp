// Byte sizes given as text by a user ("512M", "2G", "1.5GiB", "1048576"), for memory options.
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace edgetrain {

// A positive number of bytes: digits (a fraction allowed), then optionally K, M, G or T (powers of 1024)
// and an optional "B" or "iB". Anything else, zero, a negative value or one above INT64_MAX is
// kInvalidArgument naming `parameter`.
inline int64_t ParseByteSize(const std::string& text, const std::string& parameter) {
  auto fail = [&](const char* why) {
    Fail(ErrorCode::kInvalidArgument, parameter, ": '", text, "' ", why,
         " (a positive number of bytes, optionally followed by K, M, G or T for KiB, MiB, GiB or TiB)");
  };
  size_t pos = 0;
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  const size_t number_begin = pos;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
  bool digits = false, fraction = false;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
    if (text[pos] == '.') {
      if (fraction) fail("is not a byte size");
      fraction = true;
    } else {
      digits = true;
    }
    ++pos;
  }
  if (!digits) fail("is not a byte size");
  const std::string number = text.substr(number_begin, pos - number_begin);
  std::string unit;
  for (; pos < text.size(); ++pos)
    if (!std::isspace(static_cast<unsigned char>(text[pos])))
      unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[pos])));
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const std::string prefixes = "KMGT";
    const size_t power = prefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (power == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB"))
      fail("has an unknown unit");
    scale = std::pow(1024.0, static_cast<double>(power + 1));
  }
  if (number[0] == '-') fail("is negative");
  if (!fraction && scale == 1) {  // plain bytes: exact, no rounding through double
    errno = 0;
    const unsigned long long value = std::strtoull(number.c_str(), nullptr, 10);
    if (errno == ERANGE || value > static_cast<unsigned long long>(INT64_MAX)) fail("is too large");
    if (value == 0) fail("is zero");
    return static_cast<int64_t>(value);
  }
  const double bytes = std::floor(std::strtod(number.c_str(), nullptr) * scale);
  if (!(bytes < 9.2e18)) fail("is too large");
  if (bytes < 1) fail("is less than one byte");
  return static_cast<int64_t>(bytes);
}

}  // namespace edgetrain

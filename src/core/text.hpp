// Small text helpers for messages.
#pragma once

#include <string>
#include <vector>

namespace edgetrain {

// "a, b, c"
inline std::string JoinNames(const std::vector<std::string>& names, const std::string& separator = ", ") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? separator : "") + names[i];
  return out;
}

}  // namespace edgetrain

// Explicit conversions between std::string_view (our code) and Debian's absl::string_view (a
// distinct type in Abseil 20220623), for the Abseil calls that take the latter.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace fleet {

inline absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}
inline std::string_view AsStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace fleet

// fmt (9) / spdlog (1.10) formatters for the Abseil types they do not know: absl::Status and
// Debian's absl::string_view (which is not std::string_view). Include this wherever such a value is
// passed to a log call or fmt::format; defined once here.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fmt/format.h"

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const absl::Status& status, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(status.ToString(), ctx);
  }
};

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

#include "common/config/config_duration.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::config {
namespace {

// google.protobuf.Duration's documented range.
constexpr int64_t kMaxProtoSeconds = 315'576'000'000;

absl::Status NotADuration(std::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      "expected a duration such as 90s, 10m, 1h30m, 500ms or a number of seconds, got '",
      AsAbsl(text), "'"));
}

}  // namespace

absl::StatusOr<absl::Duration> ParseConfigDuration(std::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(AsAbsl(text));
  if (trimmed.empty()) return NotADuration(text);
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(trimmed, &seconds)) {
    // SimpleAtod takes "inf" and "nan"; a number of seconds is a finite one.
    if (!std::isfinite(seconds)) return NotADuration(text);
    if (seconds < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a duration cannot be negative, got '", AsAbsl(text), "'"));
    }
    if (seconds > static_cast<double>(kMaxProtoSeconds)) return NotADuration(text);
    d = absl::Seconds(seconds);
  } else if (absl::ParseDuration(trimmed, &d)) {
    if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) return NotADuration(text);
    if (d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a duration cannot be negative, got '", AsAbsl(text), "'"));
    }
    if (d > absl::Seconds(kMaxProtoSeconds)) return NotADuration(text);
  } else {
    return NotADuration(text);
  }
  return d;
}

google::protobuf::Duration ToProtoDuration(absl::Duration d) {
  google::protobuf::Duration out;
  const int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &d);
  out.set_seconds(seconds);
  out.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d)));
  return out;
}

absl::Duration FromProtoDuration(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

std::string FormatConfigDuration(const google::protobuf::Duration& d) {
  return absl::FormatDuration(FromProtoDuration(d));
}

}  // namespace fleet::config

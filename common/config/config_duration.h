// Durations as a fleet config writes them: `90s`, `10m`, `1h30m`, `500ms`, or a plain number of
// seconds (`30`, `1.5`). Never negative, never infinite. Conversions to and from
// google.protobuf.Duration, which is how the config messages hold them. Pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"

namespace fleet::config {

// InvalidArgument (message: what was expected and what was given) when `text` is not a duration.
absl::StatusOr<absl::Duration> ParseConfigDuration(std::string_view text);

// `d` must be finite and within google.protobuf.Duration's range (±10,000 years).
google::protobuf::Duration ToProtoDuration(absl::Duration d);
absl::Duration FromProtoDuration(const google::protobuf::Duration& d);

// The way a config would write it back: "1h30m", "500ms", "0s".
std::string FormatConfigDuration(const google::protobuf::Duration& d);

}  // namespace fleet::config

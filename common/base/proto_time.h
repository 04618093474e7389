// Between Abseil's time types and protobuf's (google.protobuf.Timestamp, Duration): the one place
// they are converted, for the daemon, the agent and the CLI. An infinite time (absl's "never" and
// "always") is an unset Timestamp; an unset or zero Duration is `fallback` where one is given.
// Header-only, pure functions.
#pragma once

#include <cstdint>

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace fleet {

// `t` into `*out`; an infinite `t` clears it.
inline void SetProtoTime(absl::Time t, google::protobuf::Timestamp* out) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) {
    out->Clear();
    return;
  }
  const int64_t ns = absl::ToUnixNanos(t);
  int64_t seconds = ns / 1000000000;
  int64_t nanos = ns % 1000000000;
  if (nanos < 0) {
    nanos += 1000000000;
    seconds -= 1;
  }
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(nanos));
}

inline google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  google::protobuf::Timestamp out;
  SetProtoTime(t, &out);
  return out;
}

inline absl::Time FromProtoTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

inline google::protobuf::Duration ToProtoDuration(absl::Duration d) {
  google::protobuf::Duration out;
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out.set_seconds(ns / 1000000000);
  out.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return out;
}

inline absl::Duration FromProtoDuration(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

// A policy's or a config's duration: `fallback` when it is not set (zero or negative).
inline absl::Duration ProtoDurationOr(const google::protobuf::Duration& d,
                                      absl::Duration fallback) {
  const absl::Duration out = FromProtoDuration(d);
  return out > absl::ZeroDuration() ? out : fallback;
}

}  // namespace fleet

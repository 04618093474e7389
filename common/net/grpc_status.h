// absl::Status <-> grpc::Status, the one translation at the RPC edge (the style's rule: foreign
// errors are translated once, where they enter). The codes are the same numbers in both; a message
// keeps its text. Header-only: the services and clients that use it link gRPC already.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace fleet {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// `context` (e.g. "container pve1/200: agent Launch") comes before the message, with ": ".
inline absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view context = {}) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(s.error_code()),
      context.empty() ? s.error_message() : absl::StrCat(context, ": ", s.error_message()));
}

}  // namespace fleet

// Status propagation macros with the meaning of upstream Abseil's ABSL_RETURN_IF_ERROR and
// ABSL_ASSIGN_OR_RETURN, which Debian 12's Abseil (20220623) lacks. Moving to upstream later is a
// rename.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FLEET_STATUS_CONCAT_INNER_(a, b) a##b
#define FLEET_STATUS_CONCAT_(a, b) FLEET_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the current function if it is not OK.
#define FLEET_RETURN_IF_ERROR(expr)                                          \
  do {                                                                       \
    ::absl::Status fleet_status_macro_status_ = (expr);                      \
    if (!fleet_status_macro_status_.ok()) return fleet_status_macro_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK, else moves the value
// into `lhs`, which may be a declaration (`auto x`) or an existing variable.
#define FLEET_ASSIGN_OR_RETURN(lhs, rexpr) \
  FLEET_ASSIGN_OR_RETURN_IMPL_(FLEET_STATUS_CONCAT_(fleet_statusor_, __LINE__), lhs, rexpr)

#define FLEET_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

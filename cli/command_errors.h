// How a fleetctl verb reports a failure: one line on standard error, exit status 1. A daemon that
// cannot be reached or does not answer is reported as `fleetctl: cannot reach fleetd at ...`
// (the message FleetClient wrote); anything else as `fleetctl VERB: MESSAGE`.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace fleet::cli {

// Exit statuses shared by the verbs (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;     // usage, unreachable daemon, an error from fleetd
inline constexpr int kExitNotReady = 2;  // status --until-ready: a server gave up (or all stopped)

// Writes the line and returns kExitError.
int ReportError(std::string_view verb, const absl::Status& status, std::ostream& err);

// Checks -o/--output against `allowed`: true when it is one of them, else reports
// `fleetctl VERB: flag -o/--output: 'X' is not one of A, B` and returns false.
bool CheckOutput(std::string_view verb, const std::string& output,
                 const std::vector<std::string>& allowed, std::ostream& err);

// config::ParseServerName on each (the rule the config and fleetd use); reports the first bad one.
// True when all are well-formed.
bool CheckServerNames(std::string_view verb, const std::vector<std::string>& names,
                      std::ostream& err);

}  // namespace fleet::cli

// Renderers of fleetd's per-server status rows (fleet.v1.ServerRow): the `status` table and its
// wide form, the one-line-per-change form of `status --watch` off a terminal, and the JSON
// objects of `-o json` (docs/cli.md is their contract: snake_case, every field always present,
// built as common/base/json_text.h's Json, never protobuf's JSON printer). Pure functions; `now`
// comes from the caller's clock so tests are exact.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "common/base/json_text.h"
#include "common/state/states.h"
#include "google/protobuf/timestamp.pb.h"
#include "proto/fleet.pb.h"

namespace fleet::cli {

// The Time of a wire timestamp; nullopt when unset (absent, or the zero timestamp).
std::optional<absl::Time> FromProtoTime(const google::protobuf::Timestamp& t);
void ToProtoTime(absl::Time t, google::protobuf::Timestamp* out);

// A short age for tables: "0s", "42s", "3m12s", "1h04m", "2d03h". Negative counts as zero.
std::string FormatAge(absl::Duration d);
// RFC 3339 in UTC with the fraction when there is one: "2027-01-15T08:00:03Z", "...03.25Z".
std::string FormatRfc3339(absl::Time t);

// The SGR colour of a state on a terminal ("" for none): READY green, FAILED and GAVE_UP red,
// REMEDIATING and RESTARTING yellow, the start phases cyan, STOPPED dim.
std::string_view StateColor(v1::ServerState state);

// "[#####.....] 12/40" while JIT_COMPILING with a known ninja step count, else "". `bar_width`
// 0: only "12/40".
std::string ProgressCell(const v1::ServerRow& row, int bar_width = 10);

// "host/ctid" of a server name "host/ctid/gpuN" (the name itself when it has no second '/').
std::string ContainerOfServer(std::string_view server);

// Whether a row waits on its container's remediation: REMEDIATING, or PENDING held back by a
// preflight or a remediation of its container (its `reason` says so).
bool WaitsOnRemediation(const v1::ServerRow& row);

// The plan being applied in each container ("host/ctid" -> the plan, status `applying`), as
// `status --watch` learns it from ListRemediations; absent containers: not known.
using ApplyingPlans = std::map<std::string, v1::Plan>;

// The PHASE cell: the start phase's detail; for a row waiting on a remediation, what runs and for
// how long: `remediation 7, 1m20s: SUMMARY` for the server the plan fixes, `waits on
// remediation 7, 1m20s: SUMMARY` for the others of its container (when `applying` knows the
// container's plan; the age is since the plan was made), else, for a REMEDIATING or PENDING row,
// its reason and the time in its state (`remediating: ptx_version_unsupported, 42s`, `waiting:
// the canary pve1/200/gpu0 builds the JIT cache first ..., 5s`). "" when there is nothing to say.
std::string PhaseCell(const v1::ServerRow& row, absl::Time now, const ApplyingPlans* applying);

enum class TableStyle { kNormal, kWide };

// SERVER STATE PHASE PROGRESS ELAPSED ATTEMPT DIAGNOSIS, and for kWide also PORT SINCE SUMMARY
// REASON. ELAPSED is `now` minus the attempt's start, SINCE `now` minus the state's start.
// `max_width` > 0 fits kNormal's lines into that many characters: PHASE, DIAGNOSIS and SERVER
// lose the middle of their text ("batch_pre…sm120"), PHASE first, and PROGRESS drops its bar
// (keeping n/m) before any of ATTEMPT, ELAPSED, PROGRESS or STATE is cut; only what still does not
// fit is cut at the right edge. kWide is never narrowed (lines are only cut).
std::string FormatStatusTable(const std::vector<const v1::ServerRow*>& rows, TableStyle style,
                              absl::Time now, bool color, size_t max_width = 0,
                              const ApplyingPlans* applying = nullptr);

// "8 servers: 5 READY, 2 JIT_COMPILING, 1 GAVE_UP" (states in the state machine's order).
std::string FormatStateCounts(const std::vector<const v1::ServerRow*>& rows);

// One line (no newline) for a change seen by `status --watch` off a terminal, in logfmt after the
// time, server and state: `2027-01-15T08:00:03Z pve1/200/gpu3 JIT_COMPILING phase="flashinfer
// JIT" progress=12/40 attempt=2 diagnosis=ptx_version_unsupported`. Empty fields are left out.
std::string FormatChangeLine(absl::Time at, const v1::ServerRow& row);
// `2027-01-15T08:00:03Z pve1/200/gpu3 REMOVED`
std::string FormatRemovedLine(absl::Time at, std::string_view server);

// A time as the JSON outputs write it: RFC 3339 in UTC, or null for an unset one.
Json TimeJson(const google::protobuf::Timestamp& t);
// One row as the JSON object of docs/cli.md (field names are the ServerRow field names).
Json ServerRowJson(const v1::ServerRow& row);
// {"at":...,"servers":[rows],"removed":[names]}: `status -o json`, and each line of
// `status --watch -o json`.
std::string StatusJson(std::optional<absl::Time> at, const std::vector<const v1::ServerRow*>& rows,
                       const std::vector<std::string>& removed);
// The same text, written to `out` as it is made (a fleet's table is megabytes): what `status -o
// json` prints.
void WriteStatusJson(std::optional<absl::Time> at, const std::vector<const v1::ServerRow*>& rows,
                     const std::vector<std::string>& removed, std::ostream& out);

}  // namespace fleet::cli

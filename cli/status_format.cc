#include "cli/status_format.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/text_table.h"
#include "common/base/string_view.h"
#include "common/config/server_name.h"
#include "common/state/states.h"

namespace fleet::cli {
namespace {

constexpr std::string_view kGreen = "\x1b[32m";
constexpr std::string_view kRed = "\x1b[31m";
constexpr std::string_view kYellow = "\x1b[33m";
constexpr std::string_view kCyan = "\x1b[36m";
constexpr std::string_view kDim = "\x1b[2m";
constexpr size_t kServerColumn = 0;
constexpr size_t kPhaseColumn = 2;
constexpr size_t kProgressColumn = 3;
constexpr size_t kDiagnosisColumn = 6;

// The states in the order a start goes through them (docs/design.md "Per-server state machine").
constexpr v1::ServerState kStateOrder[] = {
    v1::SERVER_STATE_PENDING,       v1::SERVER_STATE_STARTING,         v1::SERVER_STATE_LOADING,
    v1::SERVER_STATE_JIT_COMPILING, v1::SERVER_STATE_CAPTURING_GRAPHS, v1::SERVER_STATE_READY,
    v1::SERVER_STATE_FAILED,        v1::SERVER_STATE_REMEDIATING,      v1::SERVER_STATE_RESTARTING,
    v1::SERVER_STATE_GAVE_UP,       v1::SERVER_STATE_STOPPED};

std::string Age(const google::protobuf::Timestamp& since, absl::Time now) {
  std::optional<absl::Time> t = FromProtoTime(since);
  return t ? FormatAge(now - *t) : "-";
}

std::string StateText(const v1::ServerRow& row) {
  const std::string_view state = ServerStateText(row);
  return row.degraded() ? absl::StrCat(AsAbsl(state), " (degraded)") : std::string(state);
}

// A logfmt value: bare when it is a single plain word, else quoted with \" and \\ escaped.
std::string LogfmtValue(std::string_view v) {
  const bool plain = !v.empty() && v.find_first_of(" \"=\\\t\n") == std::string_view::npos;
  if (plain) return std::string(v);
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

std::optional<absl::Time> FromProtoTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return std::nullopt;
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

void ToProtoTime(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t ns = absl::ToUnixNanos(t);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

std::string FormatAge(absl::Duration d) {
  const int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatRfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", t, absl::UTCTimeZone());
}

std::string_view StateColor(v1::ServerState state) {
  switch (state) {
    case v1::SERVER_STATE_READY:
      return kGreen;
    case v1::SERVER_STATE_FAILED:
    case v1::SERVER_STATE_GAVE_UP:
      return kRed;
    case v1::SERVER_STATE_REMEDIATING:
    case v1::SERVER_STATE_RESTARTING:
      return kYellow;
    case v1::SERVER_STATE_STOPPED:
      return kDim;
    default:
      return IsStartPhase(state) ? kCyan : "";
  }
}

// The steps of the phase a server is in (weight shards while LOADING, ninja's steps while
// JIT_COMPILING); fleetd keeps only the current phase's.
bool ShowsProgress(const v1::ServerRow& row) {
  return IsStartPhase(ServerStateOf(row)) && row.progress_total() > 0;
}

std::string ProgressCell(const v1::ServerRow& row, int bar_width) {
  if (!ShowsProgress(row)) return "";
  const int64_t total = row.progress_total();
  const int64_t step = std::clamp<int64_t>(row.progress_step(), 0, total);
  if (bar_width <= 0) return absl::StrCat(step, "/", total);
  const int filled = static_cast<int>(step * bar_width / total);
  return absl::StrCat("[", std::string(filled, '#'), std::string(bar_width - filled, '.'), "] ",
                      step, "/", total);
}

std::string ContainerOfServer(std::string_view server) {
  const size_t first = server.find('/');
  const size_t second = first == std::string_view::npos ? first : server.find('/', first + 1);
  return std::string(server.substr(0, second));
}

bool WaitsOnRemediation(const v1::ServerRow& row) {
  switch (ServerStateOf(row)) {
    case v1::SERVER_STATE_REMEDIATING:
      return true;
    case v1::SERVER_STATE_PENDING:
      // fleetd's reasons for a held first launch (daemon/remediation.cc): "preflight: ..." and
      // "waiting: a remediation of the container runs" / "waiting: remediation N was interrupted".
      return absl::StartsWith(row.reason(), "preflight") ||
             (absl::StartsWith(row.reason(), "waiting: ") &&
              absl::StrContains(row.reason(), "remediation"));
    default:
      return false;
  }
}

std::string PhaseCell(const v1::ServerRow& row, absl::Time now, const ApplyingPlans* applying) {
  if (!row.phase_detail().empty()) return row.phase_detail();
  if (applying != nullptr && WaitsOnRemediation(row)) {
    auto it = applying->find(ContainerOfServer(row.server()));
    if (it != applying->end()) {
      const v1::Plan& plan = it->second;
      std::string out =
          absl::StrCat(plan.server() == row.server() ? "" : "waits on ", "remediation ", plan.id());
      if (FromProtoTime(plan.created_at()))
        absl::StrAppend(&out, ", ", Age(plan.created_at(), now));
      const std::string& what = plan.summary().empty() ? plan.diagnosis_class() : plan.summary();
      if (!what.empty()) absl::StrAppend(&out, ": ", what);
      return out;
    }
  }
  const v1::ServerState state = ServerStateOf(row);
  if (row.reason().empty() ||
      (state != v1::SERVER_STATE_REMEDIATING && state != v1::SERVER_STATE_PENDING)) {
    return "";
  }
  std::string out = row.reason();
  if (FromProtoTime(row.state_since())) absl::StrAppend(&out, ", ", Age(row.state_since(), now));
  return out;
}

namespace {

// The PHASE cell of the table: a plan's line keeps its start ("remediation 7, 1m20s: pip install
// ...": which plan, how long, what it installs) and loses its end; the others lose their middle.
// The row's GPUs: as fleetd sent them, else (a fleetd older than the field) the N of its name.
std::vector<int> RowGpus(const v1::ServerRow& row) {
  if (!row.gpus().empty()) return {row.gpus().begin(), row.gpus().end()};
  if (absl::StatusOr<v1::ServerRef> ref = config::ParseServerName(row.server()); ref.ok()) {
    return {ref->gpu()};
  }
  return {};
}

TextTable::Cell PhaseTableCell(const v1::ServerRow& row, absl::Time now,
                               const ApplyingPlans* applying) {
  TextTable::Cell cell(OrDash(PhaseCell(row, now, applying)));
  cell.elide_end = row.phase_detail().empty() && applying != nullptr && WaitsOnRemediation(row) &&
                   applying->count(ContainerOfServer(row.server())) > 0;
  return cell;
}

}  // namespace

std::string FormatStatusTable(const std::vector<const v1::ServerRow*>& rows, TableStyle style,
                              absl::Time now, bool color, size_t max_width,
                              const ApplyingPlans* applying) {
  std::vector<std::string> header = {"SERVER",  "STATE",   "PHASE",    "PROGRESS",
                                     "ELAPSED", "ATTEMPT", "DIAGNOSIS"};
  const bool wide = style == TableStyle::kWide;
  // GPUS: always in wide; in the table only when a server runs on several (tensor parallel),
  // last, so that the columns a person watches keep their places.
  bool several = false;
  for (const v1::ServerRow* row : rows) several = several || row->gpus_size() > 1;
  if (wide) {
    for (const char* h : {"PORT", "GPUS", "SINCE", "SUMMARY", "REASON"}) header.push_back(h);
  } else if (several) {
    header.push_back("GPUS");
  }
  // The narrowest PROGRESS can be: its header, or the widest n/m without the bar.
  size_t progress_min = DisplayWidth(header[kProgressColumn]);
  TextTable table(std::move(header));
  for (const v1::ServerRow* row : rows) {
    TextTable::Cell progress = OrDash(ProgressCell(*row));
    progress.narrow = ProgressCell(*row, /*bar_width=*/0);
    progress_min = std::max(progress_min, DisplayWidth(progress.narrow));
    std::vector<TextTable::Cell> cells = {
        row->server(),
        TextTable::Cell(StateText(*row), StateColor(ServerStateOf(*row))),
        PhaseTableCell(*row, now, applying),
        std::move(progress),
        row->attempt_number() > 0 ? Age(row->attempt_started_at(), now) : "-",
        row->attempt_number() > 0 ? absl::StrCat(row->attempt_number()) : "-",
        OrDash(row->last_diagnosis_class()),
    };
    std::string gpus = absl::StrJoin(RowGpus(*row), ",");
    if (gpus.empty()) gpus = "-";
    if (wide) {
      cells.emplace_back(row->port() > 0 ? absl::StrCat(row->port()) : "-");
      cells.emplace_back(std::move(gpus));
      cells.emplace_back(Age(row->state_since(), now));
      cells.emplace_back(OrDash(row->last_diagnosis_summary()));
      cells.emplace_back(OrDash(row->reason()));
    } else if (several) {
      cells.emplace_back(std::move(gpus));
    }
    table.AddRow(std::move(cells));
  }
  if (!wide) {
    // PHASE gives up room first (an op name can be 180 characters), DIAGNOSIS next, the bar of
    // PROGRESS then; SERVER only at the last. ATTEMPT, ELAPSED, STATE and PROGRESS's n/m are never
    // narrowed: they are what a person watches for. A column never gets narrower than its header.
    table.SetShrinkOrder({{kPhaseColumn, 24},
                          {kDiagnosisColumn, 16},
                          {kPhaseColumn, 16},
                          {kProgressColumn, progress_min},
                          {kPhaseColumn, 12},
                          {kDiagnosisColumn, 12},
                          {kPhaseColumn, 5},
                          {kDiagnosisColumn, 9},
                          {kServerColumn, 6}});
  }
  return table.Render(color, max_width);
}

std::string FormatStateCounts(const std::vector<const v1::ServerRow*>& rows) {
  std::map<std::string, int> counts;
  for (const v1::ServerRow* row : rows) ++counts[std::string(ServerStateText(*row))];
  std::vector<std::string> parts;
  for (v1::ServerState state : kStateOrder) {
    auto it = counts.find(std::string(StateName(state)));
    if (it == counts.end()) continue;
    parts.push_back(absl::StrCat(it->second, " ", it->first));
    counts.erase(it);
  }
  for (const auto& [state, n] : counts) parts.push_back(absl::StrCat(n, " ", OrDash(state)));
  std::string out = absl::StrCat(rows.size(), rows.size() == 1 ? " server" : " servers");
  if (!parts.empty()) absl::StrAppend(&out, ": ", absl::StrJoin(parts, ", "));
  return out;
}

std::string FormatChangeLine(absl::Time at, const v1::ServerRow& row) {
  std::string line = absl::StrCat(FormatRfc3339(absl::FromUnixSeconds(absl::ToUnixSeconds(at))),
                                  " ", row.server(), " ", OrDash(ServerStateText(row)));
  auto field = [&line](std::string_view key, std::string_view value) {
    if (!value.empty()) absl::StrAppend(&line, " ", AsAbsl(key), "=", LogfmtValue(value));
  };
  field("phase", row.phase_detail());
  if (ShowsProgress(row)) {
    field("progress", absl::StrCat(row.progress_step(), "/", row.progress_total()));
  }
  if (row.attempt_number() > 0) field("attempt", absl::StrCat(row.attempt_number()));
  if (row.degraded()) field("degraded", "true");
  field("diagnosis", row.last_diagnosis_class());
  field("reason", row.reason());
  return line;
}

std::string FormatRemovedLine(absl::Time at, std::string_view server) {
  return absl::StrCat(FormatRfc3339(absl::FromUnixSeconds(absl::ToUnixSeconds(at))), " ",
                      AsAbsl(server), " REMOVED");
}

Json TimeJson(const google::protobuf::Timestamp& t) {
  if (std::optional<absl::Time> time = FromProtoTime(t)) return FormatRfc3339(*time);
  return nullptr;
}

namespace {

// A string member, its buffer reused when it already holds a string.
void SetString(Json& slot, std::string_view value) {
  if (slot.is_string()) {
    slot.get_ref<std::string&>().assign(value);
  } else {
    slot = std::string(value);
  }
}

void SetTime(Json& slot, const google::protobuf::Timestamp& t) {
  if (std::optional<absl::Time> time = FromProtoTime(t)) {
    SetString(slot, FormatRfc3339(*time));
  } else {
    slot = nullptr;
  }
}

// The row's members in the contract's order, into `json`: an empty object (they are added) or
// one this filled before (its members are overwritten in place, so a writer of thousands of rows
// makes the object once).
void FillServerRowJson(const v1::ServerRow& row, Json& json) {
  SetString(json["server"], row.server());
  SetString(json["state"], ServerStateText(row));
  SetString(json["phase_detail"], row.phase_detail());
  json["progress_step"] = row.progress_step();
  json["progress_total"] = row.progress_total();
  json["attempt_number"] = row.attempt_number();
  SetTime(json["state_since"], row.state_since());
  SetTime(json["attempt_started_at"], row.attempt_started_at());
  SetString(json["last_diagnosis_class"], row.last_diagnosis_class());
  SetString(json["last_diagnosis_summary"], row.last_diagnosis_summary());
  json["port"] = row.port();
  Json& gpus = json["gpus"];
  gpus = Json::array();
  for (int gpu : RowGpus(row)) gpus.push_back(gpu);
  json["degraded"] = row.degraded();
  SetString(json["reason"], row.reason());
}

}  // namespace

Json ServerRowJson(const v1::ServerRow& row) {
  Json json = Json::object();
  FillServerRowJson(row, json);
  return json;
}

void WriteStatusJson(std::optional<absl::Time> at, const std::vector<const v1::ServerRow*>& rows,
                     const std::vector<std::string>& removed, std::ostream& out) {
  // The text of the one object {"at":..,"servers":[..],"removed":[..]}, written a row at a time:
  // each row's JsonText is the bytes the whole object's dump has for it (a compact dump is the
  // concatenation of its members'), and no tree of every row is ever held.
  constexpr size_t kFlushAt = 64 * 1024;
  std::string text = absl::StrCat(
      "{\"at\":", JsonText(at ? Json(FormatRfc3339(*at)) : Json(nullptr)), ",\"servers\":[");
  Json row_json = Json::object();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) text += ',';
    FillServerRowJson(*rows[i], row_json);
    text += JsonText(row_json);
    if (text.size() >= kFlushAt) {
      out << text;
      text.clear();
    }
  }
  absl::StrAppend(&text, "],\"removed\":", JsonText(removed), "}");
  out << text;
}

std::string StatusJson(std::optional<absl::Time> at, const std::vector<const v1::ServerRow*>& rows,
                       const std::vector<std::string>& removed) {
  std::ostringstream out;
  WriteStatusJson(at, rows, removed, out);
  return std::move(out).str();
}

}  // namespace fleet::cli

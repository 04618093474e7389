#include "common/events/fleet_event_json.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace fleet::events {
namespace {

std::string TimeText(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()),
                          absl::UTCTimeZone());
}

std::string Where(const fleet::v1::FleetEvent& e) {
  if (!e.server().empty()) return e.server();
  if (!e.ctid().empty()) return absl::StrCat(e.host(), "/", e.ctid());
  return e.host();
}

}  // namespace

Json FleetEventJson(const fleet::v1::FleetEvent& e) {
  Json j;
  j["index"] = e.index();
  j["at"] = TimeText(e.at());
  j["type"] = e.type();
  j["server"] = e.server();
  j["host"] = e.host();
  j["ctid"] = e.ctid();
  j["gpu"] = e.gpu();
  j["state"] = e.state();
  j["previous_state"] = e.previous_state();
  j["attempt_id"] = e.attempt_id();
  j["attempt_number"] = e.attempt_number();
  j["trigger"] = e.trigger();
  j["outcome"] = e.outcome();
  j["class"] = e.diagnosis_class();
  j["summary"] = e.summary();
  j["root_cause_line"] = e.root_cause_line();
  Json evidence = Json::array();
  for (const fleet::v1::EvidenceLine& line : e.evidence()) {
    Json l;
    l["line"] = line.line();
    l["text"] = line.text();
    evidence.push_back(std::move(l));
  }
  j["evidence"] = std::move(evidence);
  j["reason"] = e.reason();
  j["plan_id"] = e.plan_id();
  j["plan_status"] = e.plan_status();
  j["plan_summary"] = e.plan_summary();
  j["duration_seconds"] = static_cast<double>(e.duration().seconds()) + e.duration().nanos() / 1e9;
  j["template"] = e.template_();
  j["jit_cache"] = e.jit_cache();
  return j;
}

std::string NextCommand(const fleet::v1::FleetEvent& e) {
  if (!e.plan_id().empty() && e.type() == "remediation_awaiting_approval") {
    return absl::StrCat("fleetctl plan ", e.server(), "   # then: fleetctl apply ", e.plan_id());
  }
  if (!e.plan_id().empty()) return absl::StrCat("fleetctl remediations ", Where(e));
  if (!e.server().empty()) return absl::StrCat("fleetctl explain --server ", e.server());
  return "fleetctl hosts; fleetctl status";
}

std::string OneLine(const fleet::v1::FleetEvent& e) {
  std::string what;
  if (e.type() == "gave_up") {
    what = "gave up";
  } else if (e.type() == "recovered") {
    what = "recovered (READY)";
  } else if (e.type() == "remediation_awaiting_approval") {
    what = absl::StrCat("remediation ", e.plan_id(), " awaits approval");
  } else if (e.type() == "remediation_failed") {
    what = absl::StrCat("remediation ", e.plan_id(), " failed");
  } else if (e.type() == "agent_lost") {
    what = "agent lost";
  } else {
    what = e.type();
  }
  std::string line = absl::StrCat("gpu-fleet: ", Where(e), " ", what);
  if (!e.diagnosis_class().empty()) absl::StrAppend(&line, ": ", e.diagnosis_class());
  const std::string& cause = !e.summary().empty() ? e.summary() : e.reason();
  if (!cause.empty()) absl::StrAppend(&line, " (", cause, ")");
  if (!e.root_cause_line().empty()) absl::StrAppend(&line, "\nroot cause: ", e.root_cause_line());
  absl::StrAppend(&line, "\nmore: ", NextCommand(e));
  return line;
}

std::string WebhookBody(const fleet::v1::FleetEvent& e) {
  Json j = FleetEventJson(e);
  j["cause"] = !e.summary().empty() ? e.summary() : e.reason();
  j["command"] = NextCommand(e);
  j["text"] = OneLine(e);
  return JsonText(j);
}

}  // namespace fleet::events

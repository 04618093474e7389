#include "daemon/events/fleet_events.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/proto_time.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/state/states.h"

namespace fleet::daemon::events {
namespace {

// At most kMaxText bytes, cut on a UTF-8 boundary, marked when cut.
std::string Bounded(std::string_view text) {
  if (text.size() <= kMaxText) return std::string(text);
  size_t end = kMaxText - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "...";
}

void SetPlace(std::string_view container, fleet::v1::FleetEvent* e) {
  const size_t slash = container.find('/');
  e->set_host(std::string(container.substr(0, slash)));
  if (slash != std::string_view::npos) e->set_ctid(std::string(container.substr(slash + 1)));
}

}  // namespace

bool IsNotifiable(std::string_view type) {
  return type == kGaveUp || type == kRemediationAwaitingApproval || type == kRemediationFailed ||
         type == kAgentLost || type == kRecovered;
}

std::string TriggerLabel(std::string_view trigger) {
  if (trigger.empty()) return "initial";
  const size_t colon = trigger.find(':');
  return std::string(trigger.substr(0, colon));
}

fleet::v1::FleetEvent ServerEvent(std::string_view type, const ServerRecord& server,
                                  const AttemptRecord& attempt, absl::Time now) {
  fleet::v1::FleetEvent e;
  e.set_type(std::string(type));
  SetProtoTime(now, e.mutable_at());
  e.set_server(server.name);
  e.set_host(server.host);
  e.set_ctid(server.container);
  e.set_gpu(server.gpu);
  SetServerState(server.state, &e);
  e.set_reason(Bounded(server.reason));
  if (!attempt.id.empty()) {
    e.set_attempt_id(attempt.id);
    e.set_attempt_number(attempt.number);
    e.set_trigger(TriggerLabel(attempt.trigger));
  }
  const fleet::v1::Diagnosis& d = attempt.diagnosis;
  const std::string& cls =
      !attempt.diagnosis_class.empty() ? attempt.diagnosis_class : d.diagnosis_class();
  if (!cls.empty() && cls != diagnosis::classes::kNone) {
    e.set_diagnosis_class(cls);
    e.set_summary(Bounded(!attempt.summary.empty() ? attempt.summary : d.summary()));
    for (const fleet::v1::EvidenceLine& line : d.evidence()) {
      if (d.root_cause_line() > 0 && line.line() == d.root_cause_line()) {
        e.set_root_cause_line(Bounded(line.text()));
      }
    }
    // The lines around the root cause first: the excerpt is a window, not the log's head.
    int first = 0;
    for (int i = 0; i < d.evidence_size(); ++i) {
      if (d.evidence(i).line() == d.root_cause_line()) {
        first = std::max(0, i - kMaxEvidenceLines / 2);
        break;
      }
    }
    for (int i = first; i < d.evidence_size() && e.evidence_size() < kMaxEvidenceLines; ++i) {
      fleet::v1::EvidenceLine* out = e.add_evidence();
      out->set_line(d.evidence(i).line());
      out->set_text(Bounded(d.evidence(i).text()));
    }
  }
  return e;
}

fleet::v1::FleetEvent PlanEvent(std::string_view type, const fleet::v1::Plan& plan,
                                absl::Time now) {
  fleet::v1::FleetEvent e;
  e.set_type(std::string(type));
  SetProtoTime(now, e.mutable_at());
  SetPlace(plan.container(), &e);
  e.set_server(plan.server());
  e.set_diagnosis_class(plan.diagnosis_class());
  e.set_plan_id(plan.id());
  e.set_plan_status(std::string(PlanStatusText(plan)));
  e.set_plan_summary(Bounded(plan.summary()));
  e.set_reason(
      Bounded(!plan.outcome_reason().empty() ? plan.outcome_reason() : plan.report_only()));
  e.set_attempt_id(plan.attempt_id());
  return e;
}

fleet::v1::FleetEvent LinkEvent(std::string_view type, std::string_view container,
                                std::string_view reason, absl::Time now) {
  fleet::v1::FleetEvent e;
  e.set_type(std::string(type));
  SetProtoTime(now, e.mutable_at());
  SetPlace(container, &e);
  e.set_reason(Bounded(reason));
  return e;
}

}  // namespace fleet::daemon::events

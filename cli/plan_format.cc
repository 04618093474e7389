#include "cli/plan_format.h"

#include <map>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/status_format.h"
#include "cli/text_table.h"
#include "common/base/secret_names.h"
#include "common/base/string_view.h"
#include "common/config/secret_redaction.h"
#include "common/state/states.h"
#include "google/protobuf/util/message_differencer.h"

namespace fleet::cli {
namespace {

using google::protobuf::util::MessageDifferencer;

// As a shell would need it: as is when plain, else in single quotes.
std::string Quote(std::string_view s) {
  if (!s.empty() && s.find_first_of(" \t\n'\"\\$`") == std::string_view::npos) {
    return std::string(s);
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

template <typename Strings>
std::string QuotedList(const Strings& items) {
  std::vector<std::string> quoted;
  for (const std::string& item : items) quoted.push_back(Quote(item));
  return absl::StrJoin(quoted, " ");
}

std::optional<int64_t> TookMs(const v1::ActionResult& r) {
  if (!r.has_took()) return std::nullopt;
  return r.took().seconds() * 1000 + r.took().nanos() / 1000000;
}

Json StringArray(const google::protobuf::RepeatedPtrField<std::string>& items) {
  Json json = Json::array();
  for (const std::string& s : items) json.push_back(s);
  return json;
}

// The result's fields after kind and description (shared by `remediation_action` and
// `action_result`).
void AddResultFields(const v1::ActionResult* r, Json& json) {
  json["ok"] = r != nullptr ? Json(r->ok()) : Json(nullptr);
  json["message"] = r != nullptr ? r->message() : "";
  json["output_tail"] = r != nullptr ? r->output_tail() : "";
  std::optional<int64_t> ms = r != nullptr ? TookMs(*r) : std::nullopt;
  json["took_ms"] = ms ? Json(*ms) : Json(nullptr);
}

// The lines of `text` without a trailing empty one.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// What is shown of a plan: secret env values masked (fleetd masks them too; an older one did not).
v1::Plan Redacted(const v1::Plan& plan) {
  v1::Plan out = plan;
  config::RedactPlan(&out);
  return out;
}

}  // namespace

std::string ActionKindName(const v1::Action& action) {
  switch (action.kind_case()) {
    case v1::Action::kSetEnv:
      return "set_env";
    case v1::Action::kPrependPath:
      return "prepend_path";
    case v1::Action::kPipInstall:
      return "pip_install";
    case v1::Action::kPipUninstall:
      return "pip_uninstall";
    case v1::Action::kAptInstall:
      return "apt_install";
    case v1::Action::kAddServerArgs:
      return "add_server_args";
    case v1::Action::kRemoveServerArgs:
      return "remove_server_args";
    case v1::Action::kClearJitCache:
      return "clear_jit_cache";
    case v1::Action::kSymlink:
      return "symlink";
    case v1::Action::KIND_NOT_SET:
      break;
  }
  return "none";
}

std::string DescribeAction(const v1::Action& action) {
  const std::string kind = ActionKindName(action);
  switch (action.kind_case()) {
    case v1::Action::kSetEnv:
      return absl::StrCat(
          kind, " ", action.set_env().name(), "=",
          Quote(RedactedEnvValue(action.set_env().name(), action.set_env().value())));
    case v1::Action::kPrependPath:
      return absl::StrCat(kind, " ", action.prepend_path().variable(), " ",
                          Quote(action.prepend_path().directory()));
    case v1::Action::kPipInstall: {
      std::vector<std::string> reqs;
      for (const v1::Requirement& r : action.pip_install().requirements()) {
        reqs.push_back(
            Quote(r.version().empty() ? r.name() : absl::StrCat(r.name(), "==", r.version())));
      }
      return absl::StrCat(kind, " ", absl::StrJoin(reqs, " "));
    }
    case v1::Action::kPipUninstall:
      return absl::StrCat(kind, " ", QuotedList(action.pip_uninstall().packages()));
    case v1::Action::kAptInstall:
      return absl::StrCat(kind, " ", QuotedList(action.apt_install().packages()));
    case v1::Action::kAddServerArgs:
      return absl::StrCat(kind, " ", QuotedList(action.add_server_args().args()));
    case v1::Action::kRemoveServerArgs:
      return absl::StrCat(kind, " ", QuotedList(action.remove_server_args().args()));
    case v1::Action::kClearJitCache:
      return absl::StrCat(kind, " ", Quote(action.clear_jit_cache().directory()));
    case v1::Action::kSymlink:
      return absl::StrCat(kind, " ", Quote(action.symlink().link()), " -> ",
                          Quote(action.symlink().target()));
    case v1::Action::KIND_NOT_SET:
      break;
  }
  return "(no action)";
}

MatchedResults MatchResults(const v1::Plan& plan) {
  MatchedResults m;
  m.per_action.assign(plan.actions_size(), nullptr);
  int next = 0;  // the next planned action a result may belong to
  bool matching = true;
  for (const v1::ActionResult& r : plan.results()) {
    if (matching && next < plan.actions_size() &&
        MessageDifferencer::Equals(r.action(), plan.actions(next).action())) {
      m.per_action[next++] = &r;
    } else {
      matching = false;
      m.rollback.push_back(&r);
    }
  }
  return m;
}

std::string FormatTook(const google::protobuf::Duration& took) {
  if (took.seconds() == 0 && took.nanos() == 0) return "-";
  const absl::Duration d = absl::Trunc(
      absl::Seconds(took.seconds()) + absl::Nanoseconds(took.nanos()), absl::Milliseconds(1));
  return absl::FormatDuration(d);
}

std::string FormatPlan(const v1::Plan& given) {
  const v1::Plan plan = Redacted(given);
  std::string out = plan.id().empty() ? "plan" : absl::StrCat("plan ", plan.id());
  absl::StrAppend(&out, ": ", plan.status().empty() ? "-" : plan.status());
  if (!plan.trigger().empty()) absl::StrAppend(&out, ", trigger ", plan.trigger());
  absl::StrAppend(&out, ", server ", plan.server().empty() ? "-" : plan.server());
  absl::StrAppend(&out, ", container ", plan.container().empty() ? "-" : plan.container());
  absl::StrAppend(&out, ", class ", plan.diagnosis_class().empty() ? "-" : plan.diagnosis_class(),
                  "\n");
  if (!plan.summary().empty()) absl::StrAppend(&out, "summary: ", plan.summary(), "\n");
  if (!plan.report_only().empty()) {
    absl::StrAppend(&out, "nothing would be changed: ", plan.report_only(), "\n");
  }
  std::vector<std::string> traits;
  if (!plan.cuda_release().empty()) traits.push_back(absl::StrCat("CUDA ", plan.cuda_release()));
  if (plan.affects_jit_build()) traits.push_back("affects the JIT build");
  if (plan.degraded()) traits.push_back("runs degraded (a fallback)");
  if (plan.save_package_set()) traits.push_back("saves the package set for a rollback");
  if (!traits.empty()) absl::StrAppend(&out, absl::StrJoin(traits, "; "), "\n");
  if (!plan.env_changes().empty()) {
    std::map<std::string, std::string> env(plan.env_changes().begin(), plan.env_changes().end());
    std::vector<std::string> pairs;
    for (const auto& [k, v] : env) pairs.push_back(absl::StrCat(k, "=", Quote(v)));
    absl::StrAppend(&out, "env: ", absl::StrJoin(pairs, " "), "\n");
  }
  if (!plan.actions().empty()) {
    absl::StrAppend(&out, "actions:\n");
    for (int i = 0; i < plan.actions_size(); ++i) {
      const v1::PlannedAction& a = plan.actions(i);
      absl::StrAppend(&out, "  ", i + 1, ". ", DescribeAction(a.action()), "\n");
      if (!a.reason().empty()) absl::StrAppend(&out, "     ", a.reason(), "\n");
    }
  }
  if (!plan.constraints().empty()) {
    absl::StrAppend(&out, "constraints:\n");
    for (const std::string& c : plan.constraints()) absl::StrAppend(&out, "  - ", c, "\n");
  }
  if (!plan.unresolved().empty()) {
    absl::StrAppend(&out, "unresolved:\n");
    for (const std::string& u : plan.unresolved()) absl::StrAppend(&out, "  - ", u, "\n");
  }
  if (!plan.outcome_reason().empty()) {
    absl::StrAppend(&out, "outcome: ", plan.outcome_reason(), "\n");
  }
  if (PlanStatusOf(plan) == v1::PLAN_STATUS_PROPOSED && !plan.id().empty()) {
    absl::StrAppend(&out, "run: fleetctl apply ", plan.id(), "\n");
  }
  return out;
}

std::string FormatApplyResults(const v1::Plan& given, bool color) {
  const v1::Plan plan = Redacted(given);
  const MatchedResults m = MatchResults(plan);
  TextTable table({"#", "RESULT", "TOOK", "ACTION", "MESSAGE"});
  struct Failed {
    std::string label;
    const v1::ActionResult* result;
  };
  std::vector<Failed> failed;
  auto row = [&](const std::string& label, const v1::Action& action, const v1::ActionResult* r) {
    if (r == nullptr) {
      table.AddRow({label, "not run", "-", DescribeAction(action), "-"});
      return;
    }
    table.AddRow(
        {label,
         TextTable::Cell(r->ok() ? "ok" : "failed",
                         StateColor(r->ok() ? v1::SERVER_STATE_READY : v1::SERVER_STATE_FAILED)),
         FormatTook(r->took()), DescribeAction(action), r->message().empty() ? "-" : r->message()});
    if (!r->ok() && !r->output_tail().empty()) failed.push_back({label, r});
  };
  for (int i = 0; i < plan.actions_size(); ++i) {
    row(absl::StrCat(i + 1), plan.actions(i).action(), m.per_action[i]);
  }
  for (size_t i = 0; i < m.rollback.size(); ++i) {
    row(absl::StrCat("undo", i + 1), m.rollback[i]->action(), m.rollback[i]);
  }
  std::string out = table.Render(color);
  for (const Failed& f : failed) {
    absl::StrAppend(&out, "output of ", f.label, " (", DescribeAction(f.result->action()),
                    "), last lines:\n");
    for (const std::string& line : Lines(f.result->output_tail())) {
      absl::StrAppend(&out, "  | ", line, "\n");
    }
  }
  return out;
}

Json RemediationJson(const v1::Plan& given) {
  const v1::Plan plan = Redacted(given);
  const MatchedResults m = MatchResults(plan);
  Json json = Json::object();
  json["id"] = plan.id();
  json["container"] = plan.container();
  json["server"] = plan.server();
  json["trigger"] = plan.trigger();
  json["diagnosis_class"] = plan.diagnosis_class();
  json["status"] = PlanStatusText(plan);
  json["summary"] = plan.summary();
  json["report_only"] = plan.report_only();
  json["causes"] = StringArray(plan.causes());
  Json actions = Json::array();
  for (int i = 0; i < plan.actions_size(); ++i) {
    const v1::PlannedAction& a = plan.actions(i);
    Json action = Json::object();
    action["kind"] = ActionKindName(a.action());
    action["description"] = DescribeAction(a.action());
    action["reason"] = a.reason();
    AddResultFields(m.per_action[i], action);
    actions.push_back(std::move(action));
  }
  json["actions"] = std::move(actions);
  Json rollback = Json::array();
  for (const v1::ActionResult* r : m.rollback) {
    Json action = Json::object();
    action["kind"] = ActionKindName(r->action());
    action["description"] = DescribeAction(r->action());
    AddResultFields(r, action);
    rollback.push_back(std::move(action));
  }
  json["rollback"] = std::move(rollback);
  json["constraints"] = StringArray(plan.constraints());
  json["unresolved"] = StringArray(plan.unresolved());
  json["cuda_release"] = plan.cuda_release();
  json["affects_jit_build"] = plan.affects_jit_build();
  json["degraded"] = plan.degraded();
  json["save_package_set"] = plan.save_package_set();
  Json env = Json::object();
  // Sorted: a protobuf map has no order of its own.
  for (const auto& [k, v] :
       std::map<std::string, std::string>(plan.env_changes().begin(), plan.env_changes().end())) {
    env[k] = v;
  }
  json["env_changes"] = std::move(env);
  json["fingerprint"] = plan.fingerprint();
  json["attempt_id"] = plan.attempt_id();
  // One key per fact, sorted (a key given twice gets the values of both).
  std::map<std::string, std::vector<std::string>> facts;
  for (const v1::Fact& f : plan.trigger_facts()) {
    std::vector<std::string>& values = facts[f.key()];
    values.insert(values.end(), f.values().begin(), f.values().end());
  }
  Json trigger_facts = Json::object();
  for (const auto& [key, values] : facts) trigger_facts[key] = values;
  json["trigger_facts"] = std::move(trigger_facts);
  json["created_at"] = TimeJson(plan.created_at());
  json["applied_at"] = TimeJson(plan.applied_at());
  json["outcome_reason"] = plan.outcome_reason();
  // What the probes' test-compiles cost (agent/test_compile.h): the one the plan was made from,
  // and the one after it ran.
  const auto ms = [](const v1::TestCompile& t) -> Json {
    if (!t.ran()) return nullptr;
    return t.took().seconds() * 1000 + t.took().nanos() / 1000000;
  };
  json["test_compile_ms"] = ms(plan.before().test_compile());
  json["test_compile_class"] = plan.before().test_compile().ok()
                                   ? std::string()
                                   : plan.before().test_compile().diagnosis().diagnosis_class();
  json["test_compile_after_ms"] = ms(plan.after().test_compile());
  return json;
}

std::string TestCompileCell(const v1::Plan& plan) {
  const auto cell = [](const v1::TestCompile& t) -> std::string {
    if (!t.ran()) return "-";
    const double s = static_cast<double>(t.took().seconds()) + t.took().nanos() / 1e9;
    return absl::StrCat(absl::StrFormat("%.1fs", s), t.ok() ? "" : " failed");
  };
  const std::string before = cell(plan.before().test_compile());
  const std::string after = cell(plan.after().test_compile());
  if (before == "-" && after == "-") return "-";
  return absl::StrCat(before, ", after ", after);
}

}  // namespace fleet::cli

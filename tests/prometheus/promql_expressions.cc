#include "tests/prometheus/promql_expressions.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace fleet::testing {
namespace {

using Json = nlohmann::json;

// fleetd's metrics, as docs/observability.md lists them.
constexpr std::array<std::string_view, 16> kFleetMetrics = {
    "fleet_server_state",
    "fleet_server_state_since_timestamp_seconds",
    "fleet_server_diagnosis_info",
    "fleet_attempts_total",
    "fleet_server_restarts_total",
    "fleet_startup_duration_seconds",
    "fleet_phase_duration_seconds",
    "fleet_stalls_total",
    "fleet_remediations_total",
    "fleet_remediation_pending_approval",
    "fleet_agent_connected",
    "fleet_ssh_host_up",
    "fleet_events_ingested_total",
    "fleet_build_info",
    "fleet_leader",
    "fleet_leader_term",
};
constexpr std::array<std::string_view, 2> kFleetHistograms = {
    "fleet_startup_duration_seconds",
    "fleet_phase_duration_seconds",
};

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A string member of a JSON object; "" when `object` is no object or the member no string.
std::string StringMember(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

void AddPanelExpressions(const Json& panels, const std::string& file,
                         std::vector<PromqlExpression>* out) {
  if (!panels.is_array()) return;
  for (const Json& panel : panels) {
    if (!panel.is_object()) continue;
    const auto id = panel.find("id");
    const std::string where = absl::StrCat(file, ": panel ", id != panel.end() ? id->dump() : "?",
                                           " '", StringMember(panel, "title"), "'");
    if (const auto targets = panel.find("targets"); targets != panel.end() && targets->is_array()) {
      for (const Json& target : *targets) {
        const std::string expr = StringMember(target, "expr");
        if (!expr.empty()) {
          out->push_back({absl::StrCat(where, " ", StringMember(target, "refId")), expr});
        }
      }
    }
    // A collapsed row holds its panels.
    if (const auto nested = panel.find("panels"); nested != panel.end()) {
      AddPanelExpressions(*nested, file, out);
    }
  }
}

// yaml-cpp throws when asked the type of a node that a missing key gave.
bool IsSequence(const YAML::Node& node) { return node.IsDefined() && node.IsSequence(); }
bool IsMap(const YAML::Node& node) { return node.IsDefined() && node.IsMap(); }

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

absl::StatusOr<std::vector<PrometheusRule>> ReadPrometheusRules(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  std::vector<PrometheusRule> rules;
  // yaml-cpp reports malformed YAML and failed conversions by throwing.
  try {
    const YAML::Node root = YAML::Load(*text);
    const YAML::Node groups = root["groups"];
    if (!IsSequence(groups)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no `groups` list"));
    }
    for (const YAML::Node& group : groups) {
      const std::string group_name = group["name"].as<std::string>("");
      const YAML::Node group_rules = group["rules"];
      if (!IsSequence(group_rules)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": group '", group_name, "' has no `rules` list"));
      }
      for (const YAML::Node& node : group_rules) {
        PrometheusRule rule;
        rule.group = group_name;
        rule.alert = static_cast<bool>(node["alert"]);
        rule.name = node[rule.alert ? "alert" : "record"].as<std::string>("");
        rule.expr = node["expr"].as<std::string>("");
        rule.for_duration = node["for"].as<std::string>("");
        if (rule.name.empty() || rule.expr.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": group '", group_name, "': a rule without a name (alert or record) or expr"));
        }
        for (const char* key : {"labels", "annotations"}) {
          const YAML::Node map = node[key];
          if (!IsMap(map)) continue;
          auto& into = std::string_view(key) == "labels" ? rule.labels : rule.annotations;
          for (const auto& entry : map) {
            into[entry.first.as<std::string>()] = entry.second.as<std::string>();
          }
        }
        rules.push_back(std::move(rule));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return rules;
}

absl::StatusOr<std::vector<PromqlExpression>> RuleExpressions(const std::string& path) {
  absl::StatusOr<std::vector<PrometheusRule>> rules = ReadPrometheusRules(path);
  if (!rules.ok()) return rules.status();
  std::vector<PromqlExpression> out;
  for (const PrometheusRule& rule : *rules) {
    out.push_back({absl::StrCat(BaseName(path), ": ", rule.alert ? "alert " : "record ", rule.name),
                   rule.expr});
  }
  return out;
}

absl::StatusOr<std::vector<PromqlExpression>> DashboardExpressions(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  const Json dashboard = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (dashboard.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  const auto panels = dashboard.is_object() ? dashboard.find("panels") : dashboard.end();
  if (panels == dashboard.end() || !panels->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no `panels` list"));
  }
  std::vector<PromqlExpression> out;
  AddPanelExpressions(*panels, BaseName(path), &out);
  return out;
}

absl::StatusOr<std::vector<PromqlExpression>> ShippedExpressions(const std::string& source_dir) {
  absl::StatusOr<std::vector<PromqlExpression>> rules =
      RuleExpressions(absl::StrCat(source_dir, "/deploy/prometheus/fleet-rules.yml"));
  if (!rules.ok()) return rules.status();
  absl::StatusOr<std::vector<PromqlExpression>> panels =
      DashboardExpressions(absl::StrCat(source_dir, "/deploy/grafana/gpu-fleet.json"));
  if (!panels.ok()) return panels.status();
  std::vector<PromqlExpression> out = std::move(*rules);
  out.insert(out.end(), panels->begin(), panels->end());
  return out;
}

std::string WithGrafanaDefaults(std::string_view expr) {
  std::string out;
  size_t i = 0;
  while (i < expr.size()) {
    if (expr[i] != '$') {
      out += expr[i++];
      continue;
    }
    size_t end = i + 1;
    std::string_view name;
    if (end < expr.size() && expr[end] == '{') {
      const size_t close = expr.find('}', end);
      if (close == std::string_view::npos) break;
      name = expr.substr(end + 1, close - end - 1);
      end = close + 1;
    } else {
      while (end < expr.size() && IsNameChar(expr[end])) ++end;
      name = expr.substr(i + 1, end - i - 1);
    }
    if (name == "__interval" || name == "__rate_interval") {
      out += "1m";
    } else if (name == "__range") {
      out += "1h";
    } else if (!name.empty() && name.substr(0, 2) != "__") {
      out += ".*";
    } else {
      out += expr.substr(i, end - i);
    }
    i = end;
  }
  out += expr.substr(i);
  return out;
}

std::vector<std::string> FleetMetricNames(std::string_view text) {
  constexpr std::string_view kPrefix = "fleet_";
  std::vector<std::string> names;
  for (size_t at = text.find(kPrefix); at != std::string_view::npos;
       at = text.find(kPrefix, at + 1)) {
    if (at > 0 && IsNameChar(text[at - 1])) continue;
    size_t end = at + kPrefix.size();
    while (end < text.size() && IsNameChar(text[end])) ++end;
    std::string name(text.substr(at, end - at));
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(std::move(name));
    }
  }
  return names;
}

bool IsExposedFleetMetric(std::string_view name) {
  if (std::find(kFleetMetrics.begin(), kFleetMetrics.end(), name) != kFleetMetrics.end()) {
    return true;
  }
  for (std::string_view histogram : kFleetHistograms) {
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (name.size() == histogram.size() + suffix.size() &&
          name.substr(0, histogram.size()) == histogram &&
          name.substr(histogram.size()) == suffix) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace fleet::testing

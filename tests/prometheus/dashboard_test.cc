// The Grafana dashboard (deploy/grafana/gpu-fleet.json) and the alert rules
// (deploy/prometheus/fleet-rules.yml) as files: the dashboard's structure (what Grafana needs to
// import it, and the panels docs/observability.md promises), the rules' labels and annotations,
// and that every metric either names is one fleetd exposes, so renaming a metric breaks this test
// until both files follow. promtool checks the PromQL itself (promtool_test.sh).
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/prometheus/promql_expressions.h"
#include "tests/testing/subprocess.h"

namespace fleet::testing {
namespace {

using Json = nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kDatasourceUid[] = "${DS_PROMETHEUS}";

std::string DashboardPath() { return SourcePath("deploy/grafana/gpu-fleet.json"); }
std::string RulesPath() { return SourcePath("deploy/prometheus/fleet-rules.yml"); }

// The dashboard, or a null value (and a failure) when it does not parse.
Json LoadDashboard() {
  const std::string text = ReadFile(DashboardPath());
  Json dashboard = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(text.empty()) << DashboardPath() << " cannot be read";
  EXPECT_FALSE(dashboard.is_discarded()) << DashboardPath() << " is not valid JSON";
  EXPECT_TRUE(dashboard.is_object());
  return dashboard.is_object() ? dashboard : Json();
}

std::string Str(const Json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) return "";
  return object[key].get<std::string>();
}

const Json& Member(const Json& object, const char* key) {
  static const Json kNull;
  return object.is_object() && object.contains(key) ? object[key] : kNull;
}

// Every panel, a row's nested panels included.
std::vector<Json> AllPanels(const Json& dashboard) {
  std::vector<Json> out;
  std::vector<Json> todo = {Member(dashboard, "panels")};
  while (!todo.empty()) {
    const Json list = todo.back();
    todo.pop_back();
    if (!list.is_array()) continue;
    for (const Json& panel : list) {
      out.push_back(panel);
      todo.push_back(Member(panel, "panels"));
    }
  }
  return out;
}

// The exprs of a panel's targets, joined by newlines.
std::string PanelExprs(const Json& panel) {
  std::string out;
  const Json& targets = Member(panel, "targets");
  if (!targets.is_array()) return out;
  for (const Json& target : targets) absl::StrAppend(&out, Str(target, "expr"), "\n");
  return out;
}

// Whether some panel of `type` has an expr holding every one of `needles`.
bool HasPanel(const Json& dashboard, const std::string& type,
              const std::vector<std::string>& needles) {
  for (const Json& panel : AllPanels(dashboard)) {
    if (Str(panel, "type") != type) continue;
    const std::string exprs = PanelExprs(panel);
    bool all = true;
    for (const std::string& needle : needles) all = all && exprs.find(needle) != std::string::npos;
    if (all) return true;
  }
  return false;
}

TEST(Dashboard, HasItsUidTitleSchemaAndDatasourceVariable) {
  const Json dashboard = LoadDashboard();
  EXPECT_EQ(Str(dashboard, "uid"), "gpu-fleet");
  EXPECT_EQ(Str(dashboard, "title"), "gpu-fleet");
  const Json& schema = Member(dashboard, "schemaVersion");
  ASSERT_TRUE(schema.is_number_integer());
  EXPECT_GE(schema.get<int>(), 37);

  std::set<std::string> variables;
  const Json& list = Member(Member(dashboard, "templating"), "list");
  ASSERT_TRUE(list.is_array());
  for (const Json& variable : list) {
    variables.insert(Str(variable, "name"));
    if (Str(variable, "name") == "DS_PROMETHEUS") {
      EXPECT_EQ(Str(variable, "type"), "datasource");
      EXPECT_EQ(Str(variable, "query"), "prometheus");
    } else {
      // A label variable: queried through the datasource variable.
      EXPECT_EQ(Str(variable, "type"), "query") << Str(variable, "name");
      EXPECT_EQ(Str(Member(variable, "datasource"), "uid"), kDatasourceUid)
          << Str(variable, "name");
    }
  }
  EXPECT_THAT(variables, Contains("DS_PROMETHEUS"));
  EXPECT_THAT(variables, Contains("host"));
}

TEST(Dashboard, EveryPanelHasTypeGridPosDatasourceAndExpressions) {
  const Json dashboard = LoadDashboard();
  const std::vector<Json> panels = AllPanels(dashboard);
  ASSERT_THAT(panels, Not(IsEmpty()));
  std::set<int> ids;
  for (const Json& panel : panels) {
    const std::string name = absl::StrCat("panel '", Str(panel, "title"), "'");
    EXPECT_THAT(Str(panel, "type"), Not(IsEmpty())) << name;
    EXPECT_THAT(Str(panel, "title"), Not(IsEmpty())) << name;
    const Json& id = Member(panel, "id");
    EXPECT_TRUE(id.is_number_integer() && ids.insert(id.get<int>()).second)
        << name << ": a missing or repeated id";
    const Json& grid = Member(panel, "gridPos");
    for (const char* key : {"x", "y", "w", "h"}) {
      EXPECT_TRUE(Member(grid, key).is_number_integer()) << name << ": gridPos." << key;
    }
    if (Member(grid, "x").is_number_integer() && Member(grid, "w").is_number_integer()) {
      EXPECT_LE(grid["x"].get<int>() + grid["w"].get<int>(), 24) << name << ": wider than the grid";
    }
    if (Str(panel, "type") == "row") continue;  // a row has no queries of its own
    EXPECT_EQ(Str(Member(panel, "datasource"), "uid"), kDatasourceUid) << name;
    const Json& targets = Member(panel, "targets");
    ASSERT_TRUE(targets.is_array() && !targets.empty()) << name << ": no targets";
    for (const Json& target : targets) {
      EXPECT_THAT(Str(target, "expr"), Not(IsEmpty())) << name << " " << Str(target, "refId");
      EXPECT_EQ(Str(Member(target, "datasource"), "uid"), kDatasourceUid)
          << name << " " << Str(target, "refId");
    }
  }
}

TEST(Dashboard, HasTheOverviewStatesStartupDurationsAndAttemptsByClass) {
  const Json dashboard = LoadDashboard();
  // Fleet overview.
  EXPECT_TRUE(HasPanel(dashboard, "stat", {"fleet_server_state", "state=\"READY\""}));
  EXPECT_TRUE(HasPanel(dashboard, "stat", {"fleet_server_state", "state=\"GAVE_UP\""}));
  EXPECT_TRUE(HasPanel(dashboard, "stat", {"fleet_agent_connected", "== 0"}));
  EXPECT_TRUE(HasPanel(dashboard, "stat", {"fleet_remediation_pending_approval"}));
  // Per-server states.
  EXPECT_TRUE(HasPanel(dashboard, "state-timeline", {"fleet_server_state", "by (server)"}));
  // Start-up durations.
  EXPECT_TRUE(HasPanel(dashboard, "heatmap", {"fleet_startup_duration_seconds_bucket"}) ||
              HasPanel(dashboard, "timeseries",
                       {"histogram_quantile", "fleet_startup_duration_seconds_bucket"}));
  // Attempts by class.
  EXPECT_TRUE(HasPanel(dashboard, "timeseries",
                       {"sum by (class)", "fleet_attempts_total{outcome=\"failed\""}) ||
              HasPanel(dashboard, "barchart",
                       {"sum by (class)", "fleet_attempts_total{outcome=\"failed\""}));
}

TEST(FleetRules, EveryAlertHasSeverityAClassInItsSummaryAndACommand) {
  const absl::StatusOr<std::vector<PrometheusRule>> rules = ReadPrometheusRules(RulesPath());
  ASSERT_TRUE(rules.ok()) << rules.status();
  std::vector<std::string> alerts;
  for (const PrometheusRule& rule : *rules) {
    ASSERT_TRUE(rule.alert) << rule.name;
    alerts.push_back(rule.name);
    EXPECT_THAT((std::vector<std::string>{"critical", "warning", "info"}),
                Contains(rule.labels.count("severity") ? rule.labels.at("severity") : ""))
        << rule.name;
    const std::string summary =
        rule.annotations.count("summary") ? rule.annotations.at("summary") : "";
    const std::string description =
        rule.annotations.count("description") ? rule.annotations.at("description") : "";
    // The class: the diagnosis label's, or the one the rule sets itself.
    if (rule.labels.count("class")) {
      EXPECT_THAT(summary, HasSubstr(absl::StrCat("(class ", rule.labels.at("class"), ")")))
          << rule.name;
    } else {
      EXPECT_THAT(summary, HasSubstr("class {{ $labels.class }}")) << rule.name;
    }
    // A per-server alert takes the class from the server's diagnosis.
    if (rule.expr.find("fleet_server_state") != std::string::npos ||
        rule.expr.find("fleet_attempts_total") != std::string::npos) {
      EXPECT_THAT(rule.expr, HasSubstr("* on (server) group_left (class")) << rule.name;
      EXPECT_THAT(rule.expr, HasSubstr("fleet_server_diagnosis_info")) << rule.name;
    }
    EXPECT_THAT(description, HasSubstr("fleetctl ")) << rule.name;
  }
  EXPECT_THAT(alerts, ElementsAre("FleetServerGaveUp", "FleetCrashLooping", "FleetStartupSlow",
                                  "FleetAgentDown", "FleetRemediationAwaitingApproval",
                                  "FleetNoLeader", "FleetMetricsAbsent"));
}

TEST(FleetMetricNames, EveryExpressionNamesOnlyMetricsFleetdExposes) {
  const absl::StatusOr<std::vector<PromqlExpression>> exprs = ShippedExpressions(SourcePath(""));
  ASSERT_TRUE(exprs.ok()) << exprs.status();
  // Six alerts and at least one query per panel of the dashboard's.
  EXPECT_GT(exprs->size(), 6u + 10u);
  for (const PromqlExpression& expr : *exprs) {
    const std::vector<std::string> names = FleetMetricNames(expr.expr);
    EXPECT_THAT(names, Not(IsEmpty())) << expr.origin << ": no fleet metric";
    for (const std::string& name : names) {
      EXPECT_TRUE(IsExposedFleetMetric(name)) << expr.origin << ": " << name;
    }
  }
}

// The rest of the text counts too: the alerts' annotation queries, the dashboard's variable
// queries and descriptions, the rules' unit tests and comments.
TEST(FleetMetricNames, TheShippedFilesNameOnlyMetricsFleetdExposes) {
  for (const char* file :
       {"deploy/prometheus/fleet-rules.yml", "deploy/prometheus/fleet-rules.test.yml",
        "deploy/grafana/gpu-fleet.json"}) {
    const std::string text = ReadFile(SourcePath(file));
    ASSERT_THAT(text, Not(IsEmpty())) << file;
    for (const std::string& name : FleetMetricNames(text)) {
      EXPECT_TRUE(IsExposedFleetMetric(name)) << file << ": " << name;
    }
  }
}

TEST(FleetMetricNames, FindsEachIdentifierOnceAndRefusesUnknownOnes) {
  EXPECT_THAT(FleetMetricNames("sum by (class) (increase(fleet_attempts_total{x=\"1\"}[1h])) "
                               "* on (server) fleet_server_diagnosis_info or fleet_attempts_total"
                               " and gpufleet_x and my_fleet_y"),
              ElementsAre("fleet_attempts_total", "fleet_server_diagnosis_info"));
  EXPECT_TRUE(IsExposedFleetMetric("fleet_startup_duration_seconds_bucket"));
  EXPECT_TRUE(IsExposedFleetMetric("fleet_phase_duration_seconds_count"));
  EXPECT_TRUE(IsExposedFleetMetric("fleet_build_info"));
  EXPECT_FALSE(IsExposedFleetMetric("fleet_attempt_total"));          // renamed
  EXPECT_FALSE(IsExposedFleetMetric("fleet_attempts_total_bucket"));  // not a histogram
  EXPECT_FALSE(IsExposedFleetMetric("fleet_startup_duration_seconds_buckets"));
}

TEST(PromqlExpressions, WithGrafanaDefaultsGivesPrometheusPlainPromql) {
  EXPECT_EQ(WithGrafanaDefaults("sum(increase(x{server=~\"${host}/${ctid}/.*\", ctid=~\"$ctid\"}"
                                "[$__interval])) + rate(y[$__rate_interval]) + z[$__range]"),
            "sum(increase(x{server=~\".*/.*/.*\", ctid=~\".*\"}[1m])) + rate(y[1m]) + z[1h]");
  EXPECT_EQ(WithGrafanaDefaults("x[$__interval_ms] $ ${unclosed"),
            "x[$__interval_ms] $ ${unclosed");
}

TEST(PromqlExpressions, ReadErrorsNameTheFile) {
  TempDir dir;
  const absl::StatusOr<std::vector<PromqlExpression>> missing =
      DashboardExpressions(dir.Join("none.json"));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();

  dir.WriteFile("bad.json", "{\"panels\": [");
  const absl::StatusOr<std::vector<PromqlExpression>> bad =
      DashboardExpressions(dir.Join("bad.json"));
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("bad.json"));

  dir.WriteFile("bad.yml", "groups:\n  - name: g\n    rules: [ {alert: A, expr: \"x\"\n");
  const absl::StatusOr<std::vector<PromqlExpression>> yaml = RuleExpressions(dir.Join("bad.yml"));
  EXPECT_TRUE(absl::IsInvalidArgument(yaml.status())) << yaml.status();
  EXPECT_THAT(yaml.status().message(), HasSubstr("bad.yml"));

  dir.WriteFile("norules.yml", "groups:\n  - name: g\n");
  EXPECT_TRUE(absl::IsInvalidArgument(RuleExpressions(dir.Join("norules.yml")).status()));
}

TEST(PromqlExpressions, ListsRulesAndNestedPanelsWithTheirOrigin) {
  TempDir dir;
  dir.WriteFile("r.yml",
                "groups:\n"
                "  - name: g\n"
                "    rules:\n"
                "      - alert: A\n"
                "        expr: fleet_build_info == 0\n"
                "        for: 5m\n"
                "        labels: {severity: warning}\n"
                "      - record: fleet:x\n"
                "        expr: sum(fleet_stalls_total)\n");
  const absl::StatusOr<std::vector<PromqlExpression>> rules = RuleExpressions(dir.Join("r.yml"));
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 2u);
  EXPECT_EQ((*rules)[0].origin, "r.yml: alert A");
  EXPECT_EQ((*rules)[0].expr, "fleet_build_info == 0");
  EXPECT_EQ((*rules)[1].origin, "r.yml: record fleet:x");

  dir.WriteFile("d.json", R"({"panels": [
    {"id": 1, "type": "row", "title": "R", "panels": [
      {"id": 2, "type": "stat", "title": "S", "targets": [{"refId": "A", "expr": "up"}]}]},
    {"id": 3, "type": "text", "title": "T"}]})");
  const absl::StatusOr<std::vector<PromqlExpression>> panels =
      DashboardExpressions(dir.Join("d.json"));
  ASSERT_TRUE(panels.ok()) << panels.status();
  ASSERT_EQ(panels->size(), 1u);
  EXPECT_EQ((*panels)[0].origin, "d.json: panel 2 'S' A");
  EXPECT_EQ((*panels)[0].expr, "up");
}

}  // namespace
}  // namespace fleet::testing

// The PromQL that gpu-fleet ships, read back for tests: the rules of deploy/prometheus/
// fleet-rules.yml and the panel queries of deploy/grafana/gpu-fleet.json, each with where it comes
// from, and the list of metrics fleetd exposes that they may name. dashboard_test checks every
// name against that list (a renamed metric breaks it); a test that runs the expressions against a
// real Prometheus takes them from ShippedExpressions, through WithGrafanaDefaults for the
// dashboard's. Plain functions of their arguments and the files they read; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::testing {

struct PromqlExpression {
  std::string
      origin;  // "fleet-rules.yml: alert FleetCrashLooping", "gpu-fleet.json: panel 3 'READY' A"
  std::string expr;
};

// One rule of a Prometheus rules file.
struct PrometheusRule {
  std::string group;
  std::string name;    // the alert's or the recording rule's name
  bool alert = false;  // false: a recording rule
  std::string expr;
  std::string for_duration;  // "" when the rule has no `for`
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
};

// Every rule of every group of the rules file at `path`, in file order. NotFound when the file
// cannot be read, InvalidArgument when it is not a rules file (naming the path and the problem).
absl::StatusOr<std::vector<PrometheusRule>> ReadPrometheusRules(const std::string& path);

// The `expr` of every rule in the rules file at `path`.
absl::StatusOr<std::vector<PromqlExpression>> RuleExpressions(const std::string& path);

// The `expr` of every target of every panel (a row's nested panels included) of the Grafana
// dashboard at `path`, as written: with Grafana's variables. Errors as for ReadPrometheusRules.
absl::StatusOr<std::vector<PromqlExpression>> DashboardExpressions(const std::string& path);

// The rules' and then the dashboard's expressions, from the source tree at `source_dir`.
absl::StatusOr<std::vector<PromqlExpression>> ShippedExpressions(const std::string& source_dir);

// `expr` with Grafana's variables replaced by what Prometheus accepts: $__interval and
// $__rate_interval by 1m, $__range by 1h, and a label variable ($name or ${name}, a name not
// starting with __) by .*: the dashboard uses those only in regex matchers, where .* is their
// "All". Grafana's other built-ins ($__interval_ms, ...) are left as they are, for Prometheus to
// refuse.
std::string WithGrafanaDefaults(std::string_view expr);

// The identifiers starting with fleet_ in `text` (fleet_ not preceded by a letter, digit or _,
// then letters, digits and _), each once, in order of first appearance.
std::vector<std::string> FleetMetricNames(std::string_view text);

// Whether fleetd exposes `name` (docs/observability.md): a metric of its list, or the _bucket,
// _sum or _count series of one of its histograms.
bool IsExposedFleetMetric(std::string_view name);

}  // namespace fleet::testing

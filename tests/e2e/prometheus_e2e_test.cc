// fleetd's metrics through a real Prometheus (issue 14): the real fleetd (--metrics-listen on a
// port the kernel picks), fleet-agent and fleetctl run the seed scenario on a simulated container
// with 8 GPUs (tests/sim/), and /usr/bin/prometheus scrapes fleetd every second with the shipped
// rules (deploy/prometheus/fleet-rules.yml) loaded. Asked through Prometheus' HTTP API: the 8
// READY servers and the one ptx_version_unsupported failure, the HTTP service discovery of the
// READY servers (/metrics/targets), FleetServerGaveUp firing with the class in its summary for a
// server that gave up (an OOM on every start, injected into one server by a second deploy), every
// rule healthy, and every rule and dashboard expression evaluated without error and with data
// at some point of the run (those that may have none in this scenario are listed below, each
// with the reason).
//
// Skipped when Prometheus is not installed (deploy/install-deps.sh installs it). Prometheus
// cannot listen on port 0 and say which it took: it gets a port that was free a moment ago,
// outside the ephemeral range, and one more on a bind failure. Every wait is a poll of a
// condition with a deadline; everything started is killed when the test ends.
#include <curl/curl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/fleet.h"
#include "tests/prometheus/promql_expressions.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/eventually.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using e2e::CtlResult;
using e2e::Fleet;
using e2e::kCtid;
using e2e::kDeadline;
using e2e::kHost;
using e2e::Quoted;
using e2e::ServerName;
using e2e::ToolEnv;
using fleet::sim::testing::BackgroundProcess;
using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr int kGpus = e2e::kSeedGpus;
// The server made to give up, and why.
constexpr int kGiveUpGpu = 7;
constexpr char kGiveUpClass[] = "cuda_out_of_memory";

// The expressions that may have no data in this scenario, by origin (as ShippedExpressions names
// them; " (selector)" for an expression's Selector), and why. Every other one must have data at
// some point of the run: a metric that vanishes, or a label value a query selects on that fleetd
// no longer sets, shows as an empty result.
const std::map<std::string, std::string>& MayBeEmpty() {
  static const auto* const kEmpty = new std::map<std::string, std::string>{
      {"fleet-rules.yml: alert FleetCrashLooping",
       "no server fails three times while still being retried: the one that fails gives up at "
       "its third failure, and the rule leaves out GAVE_UP servers"},
      {"fleet-rules.yml: alert FleetAgentDown", "the agent is up all along"},
      {"fleet-rules.yml: alert FleetRemediationAwaitingApproval",
       "the policy's remediation is auto: no plan waits for approval"},
      {"fleet-rules.yml: alert FleetRemediationAwaitingApproval (selector)",
       "fleet_remediation_pending_approval has a series only while a plan waits"},
      {"fleet-rules.yml: alert FleetMetricsAbsent", "fleetd's metrics are there all along"},
      {"fleet-rules.yml: alert FleetNoLeader",
       "the one fleetd runs alone on SQLite: it leads all along (its selector, fleet_leader, has "
       "data)"},
      {"gpu-fleet.json: panel 5 'Agents down' A (selector)", "the agent is up all along"},
      {"gpu-fleet.json: panel 6 'Awaiting approval' A (selector)",
       "the policy's remediation is auto: no plan waits for approval"},
      {"gpu-fleet.json: panel 9 'Agents and ssh hosts' B",
       "the one container is local (loopback channel): no SSH host"},
  };
  return *kEmpty;
}

// What an expression selects before a fallback or a test on it that makes it always or never
// have data: `X or vector(0)` (a stat panel's zero), `absent(X)` and `X == N` (an alert on a
// value) give X; anything else nullopt. X must have data where the whole cannot show whether it
// still selects anything.
std::optional<std::string> Selector(const std::string& expr) {
  absl::string_view e = absl::StripAsciiWhitespace(expr);
  if (absl::ConsumeSuffix(&e, "or vector(0)")) return std::string(absl::StripAsciiWhitespace(e));
  if (absl::ConsumePrefix(&e, "absent(") && absl::ConsumeSuffix(&e, ")")) return std::string(e);
  const size_t eq = e.rfind("==");
  if (eq != absl::string_view::npos) {
    const absl::string_view value = absl::StripAsciiWhitespace(e.substr(eq + 2));
    if (!value.empty() && value.find_first_not_of("0123456789") == absl::string_view::npos) {
      return std::string(absl::StripAsciiWhitespace(e.substr(0, eq)));
    }
  }
  return std::nullopt;
}

// Re-checks `holds` every 250 ms until it is true or `timeout` passed: Prometheus' answers change
// at its scrapes and rule evaluations, with nothing to wait on.
bool Eventually(const std::function<bool()>& holds, std::chrono::milliseconds timeout = kDeadline) {
  return testing::Eventually(holds, timeout, std::chrono::milliseconds(250));
}

// --- nlohmann::json without exceptions

const Json& Member(const Json& object, const char* key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// For messages: invalid UTF-8 replaced, where dump() would throw.
std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Str(const Json& object, const char* key) {
  const Json& v = Member(object, key);
  return v.is_string() ? v.get<std::string>() : "";
}

// An instant vector's samples: each series' labels (without __name__) and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> Samples(const Json& result) {
  std::vector<Sample> out;
  if (!result.is_array()) return out;
  for (const Json& series : result) {
    Sample s;
    const Json& metric = Member(series, "metric");
    if (metric.is_object()) {
      for (const auto& [name, value] : metric.items()) {
        if (name != "__name__" && value.is_string()) s.labels[name] = value.get<std::string>();
      }
    }
    const Json& value = Member(series, "value");
    if (value.is_array() && value.size() == 2 && value[1].is_string() &&
        !absl::SimpleAtod(value[1].get<std::string>(), &s.value)) {
      s.value = -1;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string Label(const Sample& s, const std::string& name) {
  const auto it = s.labels.find(name);
  return it == s.labels.end() ? "" : it->second;
}

// The samples of a result by the value of `label`.
std::map<std::string, double> ByLabel(const Json& result, const std::string& label) {
  std::map<std::string, double> out;
  for (const Sample& s : Samples(result)) {
    out[Label(s, label)] = s.value;
  }
  return out;
}

// The value of a result of one series without labels (sum(...)); nullopt otherwise.
std::optional<double> Scalar(const Json& result) {
  const std::vector<Sample> samples = Samples(result);
  if (samples.size() != 1) return std::nullopt;
  return samples[0].value;
}

// --- HTTP (libcurl)

size_t Append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

struct HttpReply {
  long status = 0;
  std::string body;
};

// GET `url` with a 5 s deadline.
absl::StatusOr<HttpReply> HttpGet(const std::string& url) {
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return absl::InternalError("curl_easy_init failed");
  HttpReply reply;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &reply.body);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

std::string UrlEscape(const std::string& text) {
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  char* escaped = curl_easy_escape(curl.get(), text.data(), static_cast<int>(text.size()));
  std::string out = escaped == nullptr ? "" : escaped;
  curl_free(escaped);
  return out;
}

// --- Prometheus

// A Prometheus on 127.0.0.1 scraping fleetd's /metrics (and, through fleetd's HTTP service
// discovery, its READY servers) every second, evaluating the shipped rules every second.
class Prometheus {
 public:
  // Writes DIR/prometheus.yml and starts Prometheus on a free port with its TSDB in DIR/data;
  // serving once this returns. A second port when the first was taken meanwhile.
  static absl::StatusOr<std::unique_ptr<Prometheus>> Start(const std::string& dir,
                                                           int metrics_port) {
    const std::string config = dir + "/prometheus.yml";
    {
      std::ofstream out(config, std::ios::trunc);
      out << ConfigYaml(metrics_port);
      if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", config));
    }
    absl::Status last;
    for (int run = 1; run <= 2; ++run) {
      absl::StatusOr<int> port = sim::testing::FreePort();
      if (!port.ok()) return port.status();
      const std::string log = absl::StrCat(dir, "/prometheus.", run, ".log");
      auto process = BackgroundProcess::Start(
          {kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir + "/data",
           absl::StrCat("--web.listen-address=127.0.0.1:", *port)},
          ToolEnv(), log);
      if (!process.ok()) return process.status();
      const absl::Status ready = (*process)->WaitForLog(
          [](const std::string& s) {
            return absl::StrContains(s, "Server is ready to receive web requests.");
          },
          kDeadline);
      if (ready.ok()) {
        return std::unique_ptr<Prometheus>(new Prometheus(std::move(*process), *port));
      }
      const std::string text = (*process)->Log();
      last = absl::UnavailableError(
          absl::StrCat("prometheus did not start: ", ready.ToString(), "\n", text));
      if (!absl::StrContains(text, "address already in use")) break;
    }
    return last;
  }

  ~Prometheus() { process_->Stop(SIGKILL, std::chrono::seconds(10)).IgnoreError(); }

  int port() const { return port_; }
  std::string Log() const { return process_->Log(); }

  // GET /api/v1/PATH?QUERY: its `data`, or an error naming Prometheus' errorType and error.
  absl::StatusOr<Json> Api(const std::string& path, const std::string& query = "") const {
    absl::StatusOr<HttpReply> reply = HttpGet(absl::StrCat("http://127.0.0.1:", port_, "/api/v1/",
                                                           path, query.empty() ? "" : "?", query));
    if (!reply.ok()) return reply.status();
    Json body = Json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      return absl::DataLossError(
          absl::StrCat("/api/v1/", path, ": HTTP ", reply->status, ", not JSON: ", reply->body));
    }
    if (Str(body, "status") != "success") {
      return absl::InvalidArgumentError(absl::StrCat("/api/v1/", path, ": HTTP ", reply->status,
                                                     " ", Str(body, "errorType"), ": ",
                                                     Str(body, "error")));
    }
    return Member(body, "data");
  }

  // An instant query now: its `result` (a vector's array of series).
  absl::StatusOr<Json> Query(const std::string& expr) const {
    absl::StatusOr<Json> data = Api("query", "query=" + UrlEscape(expr));
    if (!data.ok()) return data.status();
    return Member(*data, "result");
  }

  // A range query from `start` to now, a point every second: its `result`.
  absl::StatusOr<Json> QueryRange(const std::string& expr, absl::Time start) const {
    absl::StatusOr<Json> data =
        Api("query_range",
            absl::StrCat("query=", UrlEscape(expr), "&start=", absl::ToUnixSeconds(start),
                         "&end=", absl::ToUnixSeconds(absl::Now()) + 1, "&step=1"));
    if (!data.ok()) return data.status();
    return Member(*data, "result");
  }

  // Polls `expr` until `holds(result)`; the last result (or error) in `last`.
  bool QueryEventually(const std::string& expr, const std::function<bool(const Json&)>& holds,
                       std::string* last) const {
    return Eventually([&] {
      absl::StatusOr<Json> result = Query(expr);
      *last = result.ok() ? Dump(*result) : result.status().ToString();
      return result.ok() && holds(*result);
    });
  }

 private:
  Prometheus(std::unique_ptr<BackgroundProcess> process, int port)
      : process_(std::move(process)), port_(port) {}

  static std::string ConfigYaml(int metrics_port) {
    const std::string fleetd = absl::StrCat("127.0.0.1:", metrics_port);
    return absl::StrCat(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [",
        Quoted(testing::SourcePath("deploy/prometheus/fleet-rules.yml")),
        "]\n"
        "scrape_configs:\n"
        "  - job_name: gpu-fleet\n"
        "    metrics_path: /metrics\n"
        "    static_configs: [{targets: [",
        Quoted(fleetd),
        "]}]\n"
        // As deploy/prometheus/prometheus.yml: each READY server's own metrics, found through
        // fleetd (the simulated server has no /metrics: its targets are found, and down).
        "  - job_name: gpu-fleet-servers\n"
        "    http_sd_configs: [{url: ",
        Quoted("http://" + fleetd + "/metrics/targets"), ", refresh_interval: 1s}]\n");
  }

  std::unique_ptr<BackgroundProcess> process_;
  int port_;
};

TEST(PrometheusE2e, SeedScenarioThroughARealPrometheusRulesFireAndEveryExpressionHasData) {
  if (access(kPrometheus, X_OK) != 0) {
    GTEST_SKIP() << kPrometheus << " is not installed (deploy/install-deps.sh installs it)";
  }
  // The seed scenario's fleet (as
  // FleetE2e.SeedScenarioEndsAllReadyInAFewLaunchesWithEveryStepRecorded runs it), fleetd with
  // metrics on a port it picks.
  // At a third of the seed run's usual speed: FleetStartupSlow has data only while a server with a
  // diagnosis starts again (the canary, then the other seven), about 4 s at speed 100, and a busy
  // machine (other tests alongside) missed every 1 s scrape of that window once in two runs.
  e2e::WorldOptions options = e2e::SeedScenarioLearningFromTheCanary();
  options.speed = 33;
  Fleet fleet(std::move(options));
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd({"--metrics-listen", "127.0.0.1:0"}));
  const int metrics_port = fleet.MetricsPort();
  ASSERT_GT(metrics_port, 0) << fleet.Diagnostics();
  std::filesystem::create_directories(fleet.Join("prometheus"));
  auto prometheus = Prometheus::Start(fleet.Join("prometheus"), metrics_port);
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const Prometheus& prom = **prometheus;

  // The rules file loaded: one group, every rule of it, each evaluated without error.
  absl::StatusOr<std::vector<testing::PrometheusRule>> rules =
      testing::ReadPrometheusRules(testing::SourcePath("deploy/prometheus/fleet-rules.yml"));
  ASSERT_TRUE(rules.ok()) << rules.status();
  std::string last;
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<Json> data = prom.Api("rules");
    last = data.ok() ? Dump(*data) : data.status().ToString();
    if (!data.ok()) return false;
    std::set<std::string> healthy;
    for (const Json& group : Member(*data, "groups")) {
      for (const Json& rule : Member(group, "rules")) {
        if (Str(rule, "health") == "ok" && Str(rule, "lastError").empty()) {
          healthy.insert(Str(rule, "name"));
        }
      }
    }
    for (const testing::PrometheusRule& rule : *rules) {
      if (!healthy.count(rule.name)) return false;
    }
    return true;
  })) << "not every rule of fleet-rules.yml is loaded and healthy: "
      << last;

  // fleetd's scrape is up and fleetd says which build it is; the expressions are checked from
  // here on (before the first scrape, FleetMetricsAbsent's absent() holds).
  ASSERT_TRUE(prom.QueryEventually(R"(up{job="gpu-fleet"} == 1 and on () fleet_build_info == 1)",
                                   [](const Json& r) { return Samples(r).size() == 1; }, &last))
      << last << "\n"
      << prom.Log();
  const absl::Time start = absl::Now() + absl::Seconds(1);  // the range query's whole seconds

  // 1. The seed scenario: 8 READY in 9 launches, the one failure the canary's PTX.
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());
  ASSERT_TRUE(prom.QueryEventually(R"(sum(fleet_server_state{state="READY"}))",
                                   [](const Json& r) { return Scalar(r) == kGpus; }, &last))
      << last << "\n"
      << fleet.Diagnostics() << prom.Log();
  // The attempts: counted when decided, so they may trail the states by a scrape.
  EXPECT_TRUE(prom.QueryEventually(
      "sum by (outcome) (fleet_attempts_total)",
      [](const Json& r) {
        return ByLabel(r, "outcome") == std::map<std::string, double>{{"failed", 1}, {"ready", 8}};
      },
      &last))
      << last;
  absl::StatusOr<Json> result =
      prom.Query(R"(sum by (class) (fleet_attempts_total{outcome="failed"}))");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ByLabel(*result, "class"),
            (std::map<std::string, double>{{"ptx_version_unsupported", 1}}))
      << Dump(*result);
  result = prom.Query("sum by (server, trigger) (fleet_attempts_total)");
  ASSERT_TRUE(result.ok()) << result.status();
  std::map<std::string, double> by_attempt;
  for (const Sample& s : Samples(*result)) {
    by_attempt[absl::StrCat(Label(s, "server"), " ", Label(s, "trigger"))] = s.value;
  }
  std::map<std::string, double> want_attempts = {{ServerName(0) + " remediation", 1}};
  for (int g = 0; g < kGpus; ++g) want_attempts[ServerName(g) + " initial"] = 1;
  EXPECT_EQ(by_attempt, want_attempts) << Dump(*result);
  // The canary's restart after its fix, by the class that caused it; the two plans, applied.
  result = prom.Query("fleet_server_restarts_total");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(Samples(*result).size(), 1u) << Dump(*result);
  EXPECT_EQ(Label(Samples(*result)[0], "server"), ServerName(0)) << Dump(*result);
  EXPECT_EQ(Label(Samples(*result)[0], "class"), "ptx_version_unsupported") << Dump(*result);
  EXPECT_EQ(Samples(*result)[0].value, 1) << Dump(*result);
  result = prom.Query("sum by (status) (fleet_remediations_total)");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ByLabel(*result, "status"), (std::map<std::string, double>{{"applied", 2}}))
      << Dump(*result);
  result = prom.Query("sum by (outcome) (fleet_startup_duration_seconds_count)");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ByLabel(*result, "outcome"),
            (std::map<std::string, double>{{"failed", 1}, {"ready", 8}}))
      << Dump(*result);
  result = prom.Query("fleet_agent_connected");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(Samples(*result).size(), 1u) << Dump(*result);
  EXPECT_EQ(Samples(*result)[0].labels,
            (std::map<std::string, std::string>{
                {"ctid", kCtid},
                {"host", kHost},
                {"instance", "127.0.0.1:" + std::to_string(fleet.MetricsPort())},
                {"job", "gpu-fleet"}}))
      << Dump(*result);
  EXPECT_EQ(Samples(*result)[0].value, 1);

  // 2. fleetd's HTTP service discovery, through Prometheus: each READY server a target of its
  // own, with the server's labels.
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<Json> data = prom.Api("targets", "state=active");
    last = data.ok() ? Dump(*data) : data.status().ToString();
    if (!data.ok()) return false;
    std::set<std::string> servers;
    for (const Json& t : Member(*data, "activeTargets")) {
      if (Str(t, "scrapePool") == "gpu-fleet-servers") {
        servers.insert(Str(Member(t, "labels"), "server"));
      }
    }
    return servers.size() == kGpus && servers.count(ServerName(0)) && servers.count(ServerName(7));
  })) << "fleetd's /metrics/targets did not give Prometheus the 8 READY servers: "
      << last;

  // 3. One server gives up: deployed again with an OOM on every start, it spends its 3 attempts.
  const CtlResult fault = fleet.DeployConfig(fleet.ConfigYaml({{"FLEET_SIM_FAULT", "oom"}}),
                                             {"--only", ServerName(kGiveUpGpu)});
  ASSERT_EQ(fault.code(), 0) << fault.output;
  Json alert;
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<Json> data = prom.Api("alerts");
    last = data.ok() ? Dump(*data) : data.status().ToString();
    if (!data.ok()) return false;
    for (const Json& a : Member(*data, "alerts")) {
      const Json& labels = Member(a, "labels");
      if (Str(labels, "alertname") == "FleetServerGaveUp" && Str(a, "state") == "firing" &&
          Str(labels, "server") == ServerName(kGiveUpGpu)) {
        alert = a;
        return true;
      }
    }
    return false;
  })) << "FleetServerGaveUp did not fire for "
      << ServerName(kGiveUpGpu) << ": " << last << "\n"
      << fleet.Ctl({"status", "-o", "wide"}).output;
  EXPECT_EQ(Str(Member(alert, "labels"), "class"), kGiveUpClass) << Dump(alert);
  EXPECT_EQ(Str(Member(alert, "labels"), "severity"), "critical") << Dump(alert);
  EXPECT_EQ(Str(Member(alert, "annotations"), "summary"),
            absl::StrCat(ServerName(kGiveUpGpu), " gave up (class ", kGiveUpClass, ")"))
      << Dump(alert);
  // The other seven serve on; the OOM shows in the failures by class.
  ASSERT_TRUE(prom.QueryEventually(R"(sum by (class) (fleet_attempts_total{outcome="failed"}))",
                                   [](const Json& r) {
                                     return ByLabel(r, "class") ==
                                            std::map<std::string, double>{
                                                {"ptx_version_unsupported", 1}, {kGiveUpClass, 3}};
                                   },
                                   &last))
      << last;
  result = prom.Query(R"(sum(fleet_server_state{state="READY"}))");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Scalar(*result), kGpus - 1) << Dump(*result);

  // 4. Every expression the rules and the dashboard hold: valid for this Prometheus, and with
  // data at some point of the run (a range query from the start, a point a second), and so is
  // what it selects where the whole cannot show that (Selector). FleetStartupSlow's has data
  // while a server starts: about 4 s of this run (the canary twice, then the other seven), so
  // that some of the scrapes a second see it.
  absl::StatusOr<std::vector<testing::PromqlExpression>> expressions =
      testing::ShippedExpressions(testing::SourcePath("."));
  ASSERT_TRUE(expressions.ok()) << expressions.status();
  ASSERT_GT(expressions->size(), rules->size());
  std::set<std::string> shipped;
  for (const testing::PromqlExpression& e : *expressions) {
    const std::string expr = testing::WithGrafanaDefaults(e.expr);
    absl::StatusOr<Json> instant = prom.Query(expr);
    EXPECT_TRUE(instant.ok()) << e.origin << ": " << instant.status() << "\n" << expr;
    absl::StatusOr<Json> range = prom.QueryRange(expr, start);
    ASSERT_TRUE(range.ok()) << e.origin << ": " << range.status() << "\n" << expr;
    shipped.insert(e.origin);
    if (!range->is_array() || range->empty()) {
      EXPECT_TRUE(MayBeEmpty().count(e.origin)) << e.origin << ": no data in the whole run\n"
                                                << expr;
    }
    const std::optional<std::string> selector = Selector(expr);
    if (!selector) continue;
    const std::string origin = e.origin + " (selector)";
    range = prom.QueryRange(*selector, start);
    ASSERT_TRUE(range.ok()) << origin << ": " << range.status() << "\n" << *selector;
    shipped.insert(origin);
    if (!range->is_array() || range->empty()) {
      EXPECT_TRUE(MayBeEmpty().count(origin)) << origin << ": no data in the whole run\n"
                                              << *selector;
    }
  }
  // The list names only what is shipped (an entry left behind would hide its successor).
  for (const auto& [origin, why] : MayBeEmpty()) {
    EXPECT_TRUE(shipped.count(origin)) << "MayBeEmpty names no shipped expression: " << origin;
  }
}

}  // namespace
}  // namespace fleet

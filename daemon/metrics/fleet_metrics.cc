#include "daemon/metrics/fleet_metrics.h"

#include <arpa/inet.h>
#include <malloc.h>

#include <set>
#include <utility>

#include "CivetServer.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "civetweb.h"
#include "common/base/json_text.h"
#include "common/base/version.h"
#include "common/log/log.h"
#include "common/state/states.h"
#include "daemon/events/fleet_events.h"
#include "daemon/metrics/tls_metrics_server.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/text_serializer.h"

namespace fleet::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

double Seconds(const google::protobuf::Duration& d) {
  return static_cast<double>(d.seconds()) + d.nanos() / 1e9;
}

ClientMetric Sample(std::vector<ClientMetric::Label> labels, double value, bool counter = false) {
  ClientMetric m;
  m.label = std::move(labels);
  if (counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

// The gauges of the fleet as it is now, read from the daemon at each scrape.
class StateCollectable : public prometheus::Collectable {
 public:
  StateCollectable(Daemon* daemon, std::function<LeaderView()> leader)
      : daemon_(daemon), leader_(std::move(leader)) {}

  std::vector<MetricFamily> Collect() const override {
    const LeaderView view = leader_ ? leader_() : LeaderView{};
    MetricFamily leading{"fleet_leader",
                         "1 while this fleetd leads the fleet (or runs alone), 0 while it stands "
                         "by; across a fleet's fleetds the sum should be 1",
                         MetricType::Gauge,
                         {Sample({}, view.self ? 1 : 0)}};
    MetricFamily term{"fleet_leader_term",
                      "The lease term this fleetd leads with (0: alone, or standing by)",
                      MetricType::Gauge,
                      {Sample({}, static_cast<double>(view.term))}};
    MetricFamily build{"fleet_build_info",
                       "Always 1: the fleetd build",
                       MetricType::Gauge,
                       {Sample({{"revision", kGitRevision}, {"version", kVersion}}, 1)}};
    if (!view.self) {
      // A standby's copy of the fleet is the leader's business: only who it is.
      std::vector<MetricFamily> out;
      for (MetricFamily* f : {&leading, &term, &build}) out.push_back(std::move(*f));
      return out;
    }
    const FleetSnapshot snap = daemon_->Snapshot();
    MetricFamily state{"fleet_server_state",
                       "1 for the server's current state, 0 for the others (a series per state)",
                       MetricType::Gauge,
                       {}};
    MetricFamily since{"fleet_server_state_since_timestamp_seconds",
                       "When the server entered its current state (unix seconds)",
                       MetricType::Gauge,
                       {}};
    MetricFamily info{
        "fleet_server_diagnosis_info",
        "Always 1: the class of the diagnosis of the server's current attempt (\"none\" when it "
        "has none)",
        MetricType::Gauge,
        {}};
    MetricFamily gpus{"fleet_server_gpus",
                      "The number of GPUs the server runs on (2 for tensor parallel over two); "
                      "`gpus` lists them, its lead (`gpu`) first",
                      MetricType::Gauge,
                      {}};
    state.metric.reserve(snap.servers.size() * 12);
    for (const FleetSnapshot::ServerInfo& s : snap.servers) {
      const std::string gpu = absl::StrCat(s.gpu);
      gpus.metric.push_back(Sample({{"ctid", s.ctid},
                                    {"gpu", gpu},
                                    {"gpus", absl::StrJoin(s.gpus, ",")},
                                    {"host", s.host},
                                    {"server", s.name}},
                                   static_cast<double>(s.gpus.size())));
      for (int v = fleet::v1::SERVER_STATE_PENDING; v <= fleet::v1::SERVER_STATE_GAVE_UP; ++v) {
        const auto each = static_cast<fleet::v1::ServerState>(v);
        state.metric.push_back(Sample({{"ctid", s.ctid},
                                       {"gpu", gpu},
                                       {"host", s.host},
                                       {"server", s.name},
                                       {"state", std::string(StateName(each))}},
                                      each == s.state ? 1 : 0));
      }
      if (s.state_since != absl::InfinitePast()) {
        since.metric.push_back(
            Sample({{"ctid", s.ctid}, {"gpu", gpu}, {"host", s.host}, {"server", s.name}},
                   absl::ToDoubleSeconds(s.state_since - absl::UnixEpoch())));
      }
      info.metric.push_back(Sample({{"class", s.diagnosis_class},
                                    {"ctid", s.ctid},
                                    {"gpu", gpu},
                                    {"host", s.host},
                                    {"server", s.name}},
                                   1));
    }
    MetricFamily agents{"fleet_agent_connected",
                        "1 while fleetd follows the container's agent, 0 while it cannot reach it",
                        MetricType::Gauge,
                        {}};
    MetricFamily ssh{"fleet_ssh_host_up",
                     "1 while fleetd reaches at least one agent of the SSH host, else 0",
                     MetricType::Gauge,
                     {}};
    std::map<std::string, bool> hosts;
    for (const FleetSnapshot::LinkInfo& l : snap.links) {
      agents.metric.push_back(Sample({{"ctid", l.ctid}, {"host", l.host}}, l.connected ? 1 : 0));
      if (l.ssh) hosts[l.host] = hosts[l.host] || l.connected;
    }
    for (const auto& [host, up] : hosts) ssh.metric.push_back(Sample({{"host", host}}, up ? 1 : 0));
    MetricFamily approval{"fleet_remediation_pending_approval",
                          "1 while a container's plan waits for `fleetctl apply` (policy ask)",
                          MetricType::Gauge,
                          {}};
    for (const FleetSnapshot::Approval& a : snap.approvals) {
      approval.metric.push_back(
          Sample({{"class", a.diagnosis_class}, {"ctid", a.ctid}, {"host", a.host}}, 1));
    }
    MetricFamily ingested{"fleet_events_ingested_total",
                          "Agent events fleetd took from the agents' streams since it started",
                          MetricType::Counter,
                          {Sample({}, static_cast<double>(daemon_->EventsIngested()), true)}};
    std::vector<MetricFamily> out;
    for (MetricFamily* f : {&state, &since, &info, &gpus, &agents, &ssh, &approval, &ingested,
                            &build, &leading, &term}) {
      out.push_back(std::move(*f));
    }
    return out;
  }

 private:
  Daemon* const daemon_;
  const std::function<LeaderView()> leader_;
};

// The metrics of the one MetricsServer of the process, for civetweb's begin_request (a plain
// function: prometheus-cpp's Exposer keeps its CivetServer, and its user data, to itself).
absl::Mutex targets_mu(absl::kConstInit);
FleetMetrics* targets_source ABSL_GUARDED_BY(targets_mu) = nullptr;

int BeginRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  const std::string_view uri(info->local_uri);
  if (uri != "/metrics/targets") return 0;  // /metrics: the Exposer's
  std::string body;
  {
    absl::MutexLock lock(&targets_mu);
    if (targets_source == nullptr) return 0;
    body = targets_source->Targets();
  }
  if (std::string_view(info->request_method) != "GET") {
    mg_send_http_error(conn, 405, "%s", "GET only\n");
    return 405;
  }
  mg_send_http_ok(conn, "application/json", static_cast<long long>(body.size()));
  mg_write(conn, body.data(), body.size());
  return 200;
}

// host:port -> (host without brackets, port text).
bool SplitListen(const std::string& listen, std::string* host, std::string* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) return false;
  *host = listen.substr(0, colon);
  *port = listen.substr(colon + 1);
  if (absl::StartsWith(*host, "[") && absl::EndsWith(*host, "]")) {
    *host = host->substr(1, host->size() - 2);
  }
  return !host->empty() && port->find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

const std::vector<double>& StartupBuckets() {
  static const std::vector<double> buckets = {10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200};
  return buckets;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

FleetMetrics::FleetMetrics(Daemon* daemon, std::function<LeaderView()> leader)
    : daemon_(daemon),
      registry_(std::make_shared<prometheus::Registry>()),
      state_(std::make_shared<StateCollectable>(daemon, std::move(leader))),
      attempts_(
          prometheus::BuildCounter()
              .Name("fleet_attempts_total")
              .Help("Start attempts by server, outcome (ready, failed, stopped, lost: counted "
                    "once, when decided), diagnosis class and trigger")
              .Register(*registry_)),
      restarts_(prometheus::BuildCounter()
                    .Name("fleet_server_restarts_total")
                    .Help("Attempts after a server's first that no deploy asked for, by the class "
                          "of the attempt before (\"none\" when it had not failed)")
                    .Register(*registry_)),
      startup_(prometheus::BuildHistogram()
                   .Name("fleet_startup_duration_seconds")
                   .Help("From launch to READY (outcome ready) or to the failure (failed)")
                   .Register(*registry_)),
      phase_(prometheus::BuildHistogram()
                 .Name("fleet_phase_duration_seconds")
                 .Help("Time spent in each start phase, observed when the server leaves it")
                 .Register(*registry_)),
      stalls_(prometheus::BuildCounter()
                  .Name("fleet_stalls_total")
                  .Help("Starts the agent reported stalled (no log progress for stall_timeout)")
                  .Register(*registry_)
                  .Add({})),
      remediations_(prometheus::BuildCounter()
                        .Name("fleet_remediations_total")
                        .Help("Remediation plans by class and final status")
                        .Register(*registry_)) {
  // Series that exist from the start at 0, so that the first observation of each is a change
  // `rate()` and `increase()` see: the start phases, and each template's outcomes.
  for (fleet::v1::ServerState p = fleet::v1::SERVER_STATE_STARTING;
       p <= fleet::v1::SERVER_STATE_CAPTURING_GRAPHS;
       p = static_cast<fleet::v1::ServerState>(p + 1)) {
    phase_.Add({{"phase", std::string(StateName(p))}}, StartupBuckets());
  }
  std::set<std::string> templates;
  for (const FleetSnapshot::ServerInfo& s : daemon_->Snapshot().servers) {
    if (!s.template_name.empty()) templates.insert(s.template_name);
  }
  for (const std::string& t : templates) {
    for (const char* outcome : {"ready", "failed"}) {
      for (const char* cache : {"warm", "cold"}) {
        startup_.Add({{"template", t}, {"outcome", outcome}, {"jit_cache", cache}},
                     StartupBuckets());
      }
    }
  }
  daemon_->journal().AddListener(this);
}

FleetMetrics::~FleetMetrics() { daemon_->journal().RemoveListener(this); }

void FleetMetrics::OnFleetEvents(const std::vector<fleet::v1::FleetEvent>& batch) {
  absl::MutexLock lock(&mu_);
  for (const fleet::v1::FleetEvent& e : batch) {
    const std::string cls = e.diagnosis_class().empty() ? "none" : e.diagnosis_class();
    if (e.type() == events::kAttemptFinished) {
      attempts_
          .Add({{"server", e.server()},
                {"outcome", e.outcome()},
                {"class", cls},
                {"trigger", e.trigger()}})
          .Increment();
      // Why the next attempt of the server is made: this one's class when it failed (a restart
      // after backoff, a remediation's), "none" when it did not (a person's restart).
      last_class_[e.server()] = e.outcome() == "failed" || e.outcome() == "lost" ? cls : "none";
      if (e.outcome() == "ready" || e.outcome() == "failed") {
        startup_
            .Add({{"template", e.template_()},
                  {"outcome", e.outcome()},
                  {"jit_cache", e.jit_cache()}},
                 StartupBuckets())
            .Observe(Seconds(e.duration()));
      }
    } else if (e.type() == events::kAttemptStarted) {
      if (e.attempt_number() > 1 && e.trigger() != "deploy" && e.trigger() != "initial") {
        auto it = last_class_.find(e.server());
        restarts_
            .Add({{"server", e.server()}, {"class", it == last_class_.end() ? "none" : it->second}})
            .Increment();
      }
    } else if (e.type() == events::kServerState) {
      const std::optional<fleet::v1::ServerState> left = ParseServerState(e.previous_state());
      if (left && IsStartPhase(*left) && e.has_duration()) {
        phase_.Add({{"phase", e.previous_state()}}, StartupBuckets())
            .Observe(Seconds(e.duration()));
      }
    } else if (e.type() == events::kStalled) {
      stalls_.Increment();
    } else if (e.type() == events::kRemediation) {
      const std::optional<fleet::v1::PlanStatus> status = ParsePlanStatus(e.plan_status());
      if (status && *status != fleet::v1::PLAN_STATUS_PROPOSED &&
          *status != fleet::v1::PLAN_STATUS_APPLYING) {
        remediations_.Add({{"class", cls}, {"status", e.plan_status()}}).Increment();
      }
    }
  }
}

std::string FleetMetrics::Text() const {
  std::vector<MetricFamily> families = registry_->Collect();
  for (MetricFamily& f : state_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

std::string FleetMetrics::Targets() const {
  const FleetSnapshot snap = daemon_->Snapshot();
  std::map<std::pair<std::string, std::string>, std::string> address;
  for (const FleetSnapshot::LinkInfo& l : snap.links) address[{l.host, l.ctid}] = l.address;
  Json out = Json::array();
  for (const FleetSnapshot::ServerInfo& s : snap.servers) {
    if (!s.ready || s.port <= 0) continue;
    const std::string& host = address[{s.host, s.ctid}];
    if (host.empty()) continue;
    Json group;
    group["targets"] =
        Json::array({absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", s.port)
                                                  : absl::StrCat(host, ":", s.port)});
    Json labels;
    labels["__metrics_path__"] = "/metrics";
    labels["server"] = s.name;
    labels["host"] = s.host;
    labels["ctid"] = s.ctid;
    labels["gpu"] = absl::StrCat(s.gpu);
    labels["gpus"] = absl::StrJoin(s.gpus, ",");
    labels["engine"] = s.engine;
    labels["template"] = s.template_name;
    group["labels"] = std::move(labels);
    out.push_back(std::move(group));
  }
  return JsonText(out);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    FleetMetrics* metrics, const MetricsServerOptions& options) {
  std::string host, port;
  if (!SplitListen(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen '", options.listen, "': give HOST:PORT (port 0: any)"));
  }
  const bool tls =
      !options.cert_file.empty() || !options.key_file.empty() || !options.ca_file.empty();
  if (tls && (options.cert_file.empty() || options.key_file.empty() || options.ca_file.empty())) {
    return absl::InvalidArgumentError(
        "--metrics-listen with TLS needs --metrics-cert, --metrics-key and --metrics-ca together");
  }
  if (!tls && !IsLoopbackHost(host) && !options.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen ", options.listen,
        " is not a loopback address: give --metrics-cert, --metrics-key and --metrics-ca (the "
        "scraper presents a certificate the CA signed), or --insecure-listen to serve plaintext"));
  }
  if (tls) {
    // Not civetweb's TLS: Debian 12's cannot use OpenSSL 3 (tls_metrics_server.h).
    auto front = TlsMetricsServer::Start(metrics, host, port, options.cert_file, options.key_file,
                                         options.ca_file);
    if (!front.ok()) return front.status();
    std::unique_ptr<MetricsServer> server(new MetricsServer());
    server->port_ = (*front)->port();
    server->tls_ = true;
    server->tls_server_ = *std::move(front);
    return server;
  }
  std::vector<std::string> civet = {
      "listening_ports",
      absl::StrCat(absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host, ":", port),
      "num_threads",
      "2",
      "request_timeout_ms",
      "10000",
      "enable_keep_alive",
      "yes"};
  static CivetCallbacks callbacks = [] {
    CivetCallbacks c{};
    c.begin_request = BeginRequest;
    // A scrape of 8000 servers builds ~100,000 series (tens of MB) on a civetweb thread, whose
    // malloc arena keeps the pages: given back after each request (BENCHMARKS.md, "Metrics").
    c.end_request = [](const mg_connection*, int) { malloc_trim(0); };
    return c;
  }();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(civet, &callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-listen ", options.listen, ": cannot serve: ", e.what()));
  }
  server->exposer_->RegisterCollectable(metrics->registry());
  server->exposer_->RegisterCollectable(metrics->state());
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  {
    absl::MutexLock lock(&targets_mu);
    targets_source = metrics;
  }
  return server;
}

MetricsServer::~MetricsServer() {
  if (exposer_ != nullptr) {
    absl::MutexLock lock(&targets_mu);
    targets_source = nullptr;
  }
  exposer_.reset();
  tls_server_.reset();
}

}  // namespace fleet::daemon

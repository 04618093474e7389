// fleetd's Prometheus metrics (docs/observability.md "Metrics"), with prometheus-cpp: the
// counters and histograms are made from the fleet's events as the journal commits them (the same
// events `fleetctl events` and the webhooks see), and the gauges of the fleet's current state
// (each server's state, agents, SSH hosts, plans awaiting approval) are read from the daemon at
// each scrape (kube-state-metrics' habit: no second copy of the state to drift). Label values are
// bounded: servers, hosts, containers, states, classes, triggers without ids; never attempt ids
// or free text.
//
// MetricsServer serves them on `fleetd --metrics-listen ADDR` (civetweb, through prometheus-cpp's
// Exposer; with TLS, TlsMetricsServer): /metrics, and /metrics/targets (Prometheus HTTP service
// discovery: every READY server's own metrics endpoint). Off loopback it needs TLS (the fleet's
// certificates: the scraper must present one the fleet CA signed) unless told --insecure-listen.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/daemon.h"
#include "daemon/fleet_service.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace fleet::daemon {

class TlsMetricsServer;

// 10 s to 2 h: a start with a warm cache takes seconds to a minute, a cold JIT build tens of
// minutes, and the default startup deadline is 90 min.
const std::vector<double>& StartupBuckets();

class FleetMetrics : public FleetEventListener {
 public:
  // Listens to `daemon`'s journal until destroyed. `leader` (fleetds sharing a record): asked
  // at each scrape; a standby exports fleet_leader 0 and its build, not the fleet's state (its
  // copy of the record is the leader's, possibly older: scrape every fleetd, and the leader's
  // series are the fleet's).
  explicit FleetMetrics(Daemon* daemon, std::function<LeaderView()> leader = nullptr);
  ~FleetMetrics() override;
  FleetMetrics(const FleetMetrics&) = delete;
  FleetMetrics& operator=(const FleetMetrics&) = delete;

  void OnFleetEvents(const std::vector<fleet::v1::FleetEvent>& events) override;

  // The event-made families, and a collectable of the state gauges; both for an Exposer.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  std::shared_ptr<prometheus::Collectable> state() const { return state_; }
  // The text exposition of everything (tests, and a scrape without HTTP).
  std::string Text() const;
  // Prometheus HTTP service discovery: a JSON array of {targets, labels}, one per READY server
  // whose container has an address; `metrics_path` per engine (SGLang and vLLM: /metrics).
  std::string Targets() const;

 private:
  Daemon* const daemon_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> state_;
  prometheus::Family<prometheus::Counter>& attempts_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Histogram>& startup_;
  prometheus::Family<prometheus::Histogram>& phase_;
  prometheus::Counter& stalls_;
  prometheus::Family<prometheus::Counter>& remediations_;
  absl::Mutex mu_;
  // Why each server's last attempt ended (its class), for the restart that follows.
  std::map<std::string, std::string> last_class_ ABSL_GUARDED_BY(mu_);
};

struct MetricsServerOptions {
  std::string listen;  // host:port (port 0: any free one)
  bool insecure = false;
  // TLS (all three, or none): the server's certificate and key, and the CA a scraper's client
  // certificate must be signed by.
  std::string cert_file, key_file, ca_file;
};

class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(FleetMetrics* metrics,
                                                              const MetricsServerOptions& options);
  ~MetricsServer();
  int port() const { return port_; }
  bool tls() const { return tls_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;  // plaintext (civetweb)
  std::unique_ptr<TlsMetricsServer> tls_server_;  // mutual TLS (OpenSSL)
  int port_ = 0;
  bool tls_ = false;
};

// Whether `host` (of a listen address) is a loopback one: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackHost(const std::string& host);

}  // namespace fleet::daemon

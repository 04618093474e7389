// TlsMetricsServer: fleetd's /metrics and /metrics/targets over mutual TLS (OpenSSL), for a
// --metrics-listen address off loopback. Debian 12's civetweb (what prometheus-cpp's Exposer
// serves with) loads libssl at run time and looks for a function OpenSSL 3 no longer has
// (SSL_get_peer_certificate): its TLS listener crashes on the first handshake. So the TLS
// listener is this small one: one request per connection (`Connection: close`), GET only, the
// request head bounded (8 KiB, 10 s), at most 16 connections at a time, the client's
// certificate required and checked against the CA. The bodies are the same as the plaintext
// server's (FleetMetrics::Text, Targets: prometheus-cpp's text format).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace fleet::daemon {

class FleetMetrics;

class TlsMetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<TlsMetricsServer>> Start(
      FleetMetrics* metrics, const std::string& host, const std::string& port,
      const std::string& cert_file, const std::string& key_file, const std::string& ca_file);
  ~TlsMetricsServer();
  int port() const { return port_; }

 private:
  TlsMetricsServer() = default;
  void AcceptLoop();
  void Serve(uint64_t id, int fd);

  FleetMetrics* metrics_ = nullptr;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: the destructor wakes the accept loop
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::set<int> open_ ABSL_GUARDED_BY(mu_);  // connections being served (shut down at stop)
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread accept_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::thread> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);  // joined by the accept loop
};

}  // namespace fleet::daemon

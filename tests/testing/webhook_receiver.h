// WebhookReceiver: a real HTTP(S) server on 127.0.0.1 (port 0) standing in for a webhook's
// receiver in the notifier's and the end-to-end tests. It records every request (body and
// headers) as it arrives, answers each with the next status of its script (200 once the script is
// spent), and can hang: while held, requests wait with their connection open and nothing answered
// until Release(). Its own sockets, and OpenSSL for HTTPS: civetweb's TLS (what it used before)
// calls a function OpenSSL 3 no longer exports and crashes on the first handshake. One request per
// connection (`Connection: close`); a head is bounded (16 KiB) and a body by its Content-Length
// (at most 4 MiB). Tests only; thread-safe (one thread per connection and the test's).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace fleet::testing {

struct ReceivedRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

class WebhookReceiver {
 public:
  // Plain HTTP when `tls_pem` is empty; else HTTPS with that PEM file (certificate then key).
  static absl::StatusOr<std::unique_ptr<WebhookReceiver>> Start(const std::string& tls_pem = "");
  ~WebhookReceiver();  // releases the held requests, then stops the server
  WebhookReceiver(const WebhookReceiver&) = delete;
  WebhookReceiver& operator=(const WebhookReceiver&) = delete;

  int port() const { return port_; }
  // "http(s)://127.0.0.1:PORT/hook"
  std::string url() const;

  // The statuses of the next answers, in order (after those still scripted); then 200.
  void AnswerNext(const std::vector<int>& statuses) ABSL_LOCKS_EXCLUDED(mu_);
  // From now on requests are recorded, then wait unanswered until Release().
  void Hold() ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<ReceivedRequest> Requests() const ABSL_LOCKS_EXCLUDED(mu_);
  // Until `count` requests arrived (true) or `timeout` passed.
  bool WaitForRequests(size_t count, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  // Until `count` requests are held unanswered (true) or `timeout` passed.
  bool WaitForHeld(size_t count, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  WebhookReceiver() = default;
  void AcceptLoop();
  // One connection: its request recorded and answered (after the hold, if any).
  void Serve(int fd) ABSL_LOCKS_EXCLUDED(mu_);

  SSL_CTX* ssl_ctx_ = nullptr;  // HTTPS; constant after Start
  int listen_fd_ = -1;          // constant after Start
  std::string scheme_;          // constant after Start
  int port_ = 0;                // constant after Start
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  std::vector<ReceivedRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::deque<int> script_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int> open_ ABSL_GUARDED_BY(mu_);  // connections being served (shut down at the end)
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fleet::testing

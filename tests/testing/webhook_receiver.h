// WebhookReceiver: a real HTTP(S) server on 127.0.0.1 (civetweb, port 0) standing in for a
// webhook's receiver in the notifier's and the end-to-end tests. It records every request (body
// and headers) as it arrives, answers each with the next status of its script (200 once the
// script is spent), and can hang: while held, requests wait with their connection open and
// nothing answered until Release(). Tests only; thread-safe (civetweb's threads and the test's).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

class CivetServer;
struct mg_connection;

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
  class Handler;
  WebhookReceiver() = default;
  // A request, recorded and answered (after the hold, if any); civetweb's thread.
  void Serve(mg_connection* conn) ABSL_LOCKS_EXCLUDED(mu_);

  std::unique_ptr<Handler> handler_;  // constant after Start
  std::unique_ptr<CivetServer> server_;
  std::string scheme_;  // constant after Start
  int port_ = 0;        // constant after Start

  mutable absl::Mutex mu_;
  std::vector<ReceivedRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::deque<int> script_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fleet::testing

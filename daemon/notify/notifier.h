// Notifier: delivers the webhooks of the fleet's events (Notify in the fleet config;
// docs/observability.md "Webhooks"). The daemon makes each delivery (its row in table
// deliveries, with its JSON body) in the commit that records the event, and hands it here
// (DeliverySink); a few worker threads POST it and record every try (Daemon::RecordDelivery):
// a 2xx is delivered; a 408, 429, 5xx, timeout or connection error is tried again after a
// backoff (initial, doubling, up to a maximum) until the entry's max_attempts; any other answer
// fails it at once. One delivery at a time per receiver, in order, so a receiver that hangs holds
// one worker for at most its timeout and never fleetd's loop; a queue past its limit records the
// extra deliveries as dropped instead of growing. Deliveries a fleetd left pending are handed
// back at its next start (Daemon::SetDeliverySink).
//
// The body is signed (GitHub's habit) when the entry has a secret_file: header
// X-Fleet-Signature-256: sha256=<hex HMAC-SHA256 of the body>, the key read from the file at each
// delivery (trailing newlines dropped), so a rotated key is used at once. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/daemon.h"

namespace fleet::daemon {

// One POST's result: the HTTP status (0 when none came) or the transport's error.
struct PostResult {
  int http_status = 0;
  std::string error;
};
using Headers = std::vector<std::pair<std::string, std::string>>;
// A POST of `body` to notify.url, honouring notify.timeout and notify.ca_file; returns early
// once `*stop` is set.
using PostFunction =
    std::function<PostResult(const fleet::v1::Notify& notify, const std::string& body,
                             const Headers& headers, const std::atomic<bool>* stop)>;
// The real one: libcurl, TLS checked, no redirects, http(s) only.
PostResult CurlPost(const fleet::v1::Notify& notify, const std::string& body,
                    const Headers& headers, const std::atomic<bool>* stop);

// "sha256=<hex>" of HMAC-SHA256(key, body).
std::string SignatureHeader(const std::string& key, const std::string& body);

struct NotifierOptions {
  int workers = 2;
  size_t queue_limit = 10000;
  absl::Duration backoff_initial = absl::Seconds(1);
  absl::Duration backoff_max = absl::Minutes(5);
  int max_attempts = 8;  // Notify.max_attempts' default
};

class Notifier : public DeliverySink {
 public:
  using Recorder = std::function<absl::Status(const DeliveryRecord&)>;
  Notifier(Recorder record, PostFunction post = CurlPost, NotifierOptions options = {});
  ~Notifier() override;  // stops the workers (a POST in flight is abandoned)

  void Configure(std::vector<fleet::v1::Notify> notify) override ABSL_LOCKS_EXCLUDED(mu_);
  void Deliver(std::vector<DeliveryRecord> deliveries) override ABSL_LOCKS_EXCLUDED(mu_);

  // Deliveries waiting or in flight (tests).
  size_t Pending() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);
  // One try of `d` (without the lock): its outcome set in `d`.
  void Try(DeliveryRecord& d, const fleet::v1::Notify* notify);
  void Save(const DeliveryRecord& d);

  const Recorder record_;
  const PostFunction post_;
  const NotifierOptions options_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::map<std::string, fleet::v1::Notify> notify_ ABSL_GUARDED_BY(mu_);  // by name
  std::vector<DeliveryRecord> queue_ ABSL_GUARDED_BY(mu_);                // waiting (not in flight)
  std::map<std::string, int> busy_ ABSL_GUARDED_BY(mu_);  // receivers with one in flight
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // moves when a worker may have work
  std::vector<std::thread> workers_;
};

}  // namespace fleet::daemon

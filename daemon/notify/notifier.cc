#include "daemon/notify/notifier.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/proto_time.h"
#include "common/base/version.h"
#include "common/config/webhook_url.h"
#include "common/log/log.h"

namespace fleet::daemon {
namespace {

spdlog::logger& Log() { return log::Get(log::Component::kDaemon); }

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

int Abort(void* stop, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(stop)->load() ? 1 : 0;
}

bool Retryable(const PostResult& r) {
  return r.http_status == 0 || r.http_status == 408 || r.http_status == 429 || r.http_status >= 500;
}

}  // namespace

std::string SignatureHeader(const std::string& key, const std::string& body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &length);
  std::string out = "sha256=";
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

PostResult CurlPost(const fleet::v1::Notify& notify, const std::string& body,
                    const Headers& headers, const std::atomic<bool>* stop) {
  PostResult result;
  if (absl::Status s = config::CheckWebhookUrl(notify.url()); !s.ok()) {
    result.error = absl::StrCat("url: ", s.message());
    return result;
  }
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    result.error = "libcurl: cannot start";
    return result;
  }
  curl_slist* list = nullptr;
  for (const auto& [name, value] : headers) {
    list = curl_slist_append(list, absl::StrCat(name, ": ", value).c_str());
  }
  const absl::Duration timeout =
      notify.has_timeout() ? FromProtoDuration(notify.timeout()) : absl::Seconds(10);
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, notify.url().c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  curl_easy_setopt(
      curl, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(absl::ToInt64Milliseconds(std::min(timeout, absl::Seconds(5)))));
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!notify.ca_file().empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, notify.ca_file().c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, Abort);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(stop));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    result.http_status = static_cast<int>(status);
  } else {
    result.error = error[0] != '\0' ? error : curl_easy_strerror(code);
  }
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  return result;
}

Notifier::Notifier(Recorder record, PostFunction post, NotifierOptions options)
    : record_(std::move(record)), post_(std::move(post)), options_(options) {
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { Work(); });
  }
}

Notifier::~Notifier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_ = true;
  for (std::thread& t : workers_) t.join();
}

void Notifier::Configure(std::vector<fleet::v1::Notify> notify) {
  absl::MutexLock lock(&mu_);
  notify_.clear();
  for (fleet::v1::Notify& n : notify) notify_[n.name()] = std::move(n);
}

void Notifier::Deliver(std::vector<DeliveryRecord> deliveries) {
  std::vector<DeliveryRecord> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (DeliveryRecord& d : deliveries) {
      if (queue_.size() + in_flight_ >= options_.queue_limit) {
        d.status = "dropped";
        d.error = absl::StrCat("the webhook queue is full (", options_.queue_limit, " waiting)");
        d.finished_at = absl::Now();
        dropped.push_back(std::move(d));
        continue;
      }
      queue_.push_back(std::move(d));
    }
    ++generation_;
  }
  for (const DeliveryRecord& d : dropped) {
    Log().warn("{} webhook {}: delivery {} of event {} dropped: {}",
               log::LogFields{.server = d.server}, d.notify, d.id, d.event_index, d.error);
    Save(d);
  }
}

size_t Notifier::Pending() const {
  absl::MutexLock lock(&mu_);
  return queue_.size() + in_flight_;
}

void Notifier::Save(const DeliveryRecord& d) {
  if (absl::Status s = record_(d); !s.ok()) {
    Log().warn("{} webhook {}: delivery {}: cannot record its outcome: {}",
               log::LogFields{.server = d.server}, d.notify, d.id, s);
  }
}

void Notifier::Work() {
  while (true) {
    DeliveryRecord d;
    fleet::v1::Notify notify;
    bool known = false;
    {
      absl::MutexLock lock(&mu_);
      // The earliest due delivery of a receiver with none in flight (the queue is in id order:
      // a receiver's deliveries go in the order their events happened).
      while (true) {
        if (stopping_) return;
        const absl::Time now = absl::Now();
        absl::Time next = absl::InfiniteFuture();
        auto pick = queue_.end();
        std::set<std::string> waiting;  // receivers whose first delivery is not due yet
        for (auto it = queue_.begin(); it != queue_.end(); ++it) {
          if (busy_[it->notify] > 0 || waiting.count(it->notify) > 0) continue;
          if (it->next_at <= now) {
            pick = it;
            break;
          }
          next = std::min(next, it->next_at);
          waiting.insert(it->notify);  // its later ones wait behind it
        }
        if (pick != queue_.end()) {
          d = std::move(*pick);
          queue_.erase(pick);
          break;
        }
        const uint64_t seen = generation_;
        auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || generation_ != seen;
        };
        mu_.AwaitWithDeadline(absl::Condition(&changed), next);
      }
      ++busy_[d.notify];
      ++in_flight_;
      auto it = notify_.find(d.notify);
      if (it != notify_.end()) {
        notify = it->second;
        known = true;
      }
    }
    Try(d, known ? &notify : nullptr);
    Save(d);
    {
      absl::MutexLock lock(&mu_);
      --busy_[d.notify];
      --in_flight_;
      if (d.status == "pending") {
        // Back in its place: before the receiver's later ones.
        auto at = std::find_if(queue_.begin(), queue_.end(),
                               [&](const DeliveryRecord& q) { return q.id > d.id; });
        queue_.insert(at, std::move(d));
      }
      ++generation_;  // its receiver is free again
    }
  }
}

void Notifier::Try(DeliveryRecord& d, const fleet::v1::Notify* notify) {
  const absl::Time now = absl::Now();
  if (notify == nullptr) {
    d.status = "dropped";
    d.error = absl::StrCat("notify '", d.notify, "' is no longer in the config");
    d.finished_at = now;
    return;
  }
  ++d.attempts;
  PostResult r;
  Headers headers = {{"Content-Type", "application/json"},
                     {"User-Agent", absl::StrCat("gpu-fleet/", kVersion)},
                     {"X-Fleet-Event", d.event_type},
                     {"X-Fleet-Delivery", absl::StrCat(d.id)}};
  bool send = true;
  if (!notify->secret_file().empty()) {
    std::ifstream in(notify->secret_file(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    std::string key = text.str();
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    if (!in || key.empty()) {
      // Never sent unsigned: the receiver would have to accept anyone's.
      r.error = absl::StrCat("secret_file ", notify->secret_file(), ": unreadable or empty");
      send = false;
    } else {
      headers.emplace_back("X-Fleet-Signature-256", SignatureHeader(key, d.body));
    }
  }
  if (send) r = post_(*notify, d.body, headers, &stop_);
  d.http_status = r.http_status;
  d.error = r.http_status >= 200 && r.http_status < 300
                ? ""
                : (!r.error.empty() ? r.error : absl::StrCat("HTTP ", r.http_status));
  const int max_attempts =
      notify->max_attempts() > 0 ? notify->max_attempts() : options_.max_attempts;
  if (r.http_status >= 200 && r.http_status < 300) {
    d.status = "delivered";
    d.finished_at = absl::Now();
    d.next_at = absl::InfinitePast();
  } else if (Retryable(r) && d.attempts < max_attempts && !stop_) {
    absl::Duration wait = options_.backoff_initial;
    for (int i = 1; i < d.attempts && wait < options_.backoff_max; ++i) wait *= 2;
    d.next_at = absl::Now() + std::min(wait, options_.backoff_max);
    Log().info("{} webhook {}: delivery {} ({}) try {} failed: {} (again in {})",
               log::LogFields{.server = d.server}, d.notify, d.id, d.event_type, d.attempts,
               d.error, absl::FormatDuration(std::min(wait, options_.backoff_max)));
  } else if (stop_ && Retryable(r)) {
    d.next_at = now;  // cut off by the stop: stays pending, the next start delivers it
  } else {
    d.status = "failed";
    d.finished_at = absl::Now();
    Log().warn("{} webhook {}: delivery {} ({}) failed after {} tries: {}",
               log::LogFields{.server = d.server}, d.notify, d.id, d.event_type, d.attempts,
               d.error);
  }
}

}  // namespace fleet::daemon

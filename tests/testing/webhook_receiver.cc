#include "tests/testing/webhook_receiver.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <thread>
#include <utility>

#include "CivetServer.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "civetweb.h"

namespace fleet::testing {
namespace {

// civetweb's own words for a failed start (its exception says only "null context"): logged from
// the thread that starts the server.
thread_local std::string start_errors;

int LogMessage(const mg_connection*, const char* message) {
  absl::StrAppend(&start_errors, start_errors.empty() ? "" : "; ", message);
  return 1;
}

}  // namespace

class WebhookReceiver::Handler : public CivetHandler {
 public:
  explicit Handler(WebhookReceiver* receiver) : receiver_(receiver) {}
  bool handlePost(CivetServer*, mg_connection* conn) override {
    receiver_->Serve(conn);
    return true;
  }

 private:
  WebhookReceiver* const receiver_;
};

absl::StatusOr<std::unique_ptr<WebhookReceiver>> WebhookReceiver::Start(
    const std::string& tls_pem) {
  std::unique_ptr<WebhookReceiver> r(new WebhookReceiver());
  r->scheme_ = tls_pem.empty() ? "http" : "https";
  std::vector<std::string> options = {
      "listening_ports",   tls_pem.empty() ? "127.0.0.1:0" : "127.0.0.1:0s",
      "num_threads",       "8",
      "enable_keep_alive", "no"};
  if (!tls_pem.empty()) {
    for (const char* o : {"ssl_certificate", tls_pem.c_str(), "ssl_protocol_version", "4"}) {
      options.push_back(o);
    }
  }
  static const CivetCallbacks callbacks = [] {
    CivetCallbacks c{};
    c.log_message = LogMessage;
    return c;
  }();
  start_errors.clear();
  try {
    r->server_ = std::make_unique<CivetServer>(options, &callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("webhook receiver: civetweb: ", e.what(), ": ", start_errors));
  }
  const std::vector<int> ports = r->server_->getListeningPorts();
  if (ports.empty() || ports[0] <= 0) {
    return absl::UnavailableError("webhook receiver: civetweb listens on no port");
  }
  r->port_ = ports[0];
  r->handler_ = std::make_unique<Handler>(r.get());
  r->server_->addHandler("/", r->handler_.get());
  return r;
}

WebhookReceiver::~WebhookReceiver() {
  Release();
  if (!server_) return;
  // close() waits for civetweb's threads (none is held any more). Its listening thread sees the
  // stop only between polls of 2 s: a connection wakes it at once, which saves each test 2 s.
  absl::Notification closed;
  std::thread closer([&] {
    server_->close();
    closed.Notify();
  });
  do {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    close(fd);
  } while (!closed.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  closer.join();
}

std::string WebhookReceiver::url() const {
  return absl::StrCat(scheme_, "://127.0.0.1:", port_, "/hook");
}

void WebhookReceiver::AnswerNext(const std::vector<int>& statuses) {
  absl::MutexLock lock(&mu_);
  script_.insert(script_.end(), statuses.begin(), statuses.end());
}

void WebhookReceiver::Hold() {
  absl::MutexLock lock(&mu_);
  hold_ = true;
}

void WebhookReceiver::Release() {
  absl::MutexLock lock(&mu_);
  hold_ = false;
}

std::vector<ReceivedRequest> WebhookReceiver::Requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

bool WebhookReceiver::WaitForRequests(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, count]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.size() >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
}

bool WebhookReceiver::WaitForHeld(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto held = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&held), timeout);
}

void WebhookReceiver::Serve(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  ReceivedRequest request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  request.path = info->local_uri != nullptr ? info->local_uri : "";
  for (int i = 0; i < info->num_headers; ++i) {
    request.headers[absl::AsciiStrToLower(info->http_headers[i].name)] =
        info->http_headers[i].value;
  }
  char buffer[4096];
  for (int n; (n = mg_read(conn, buffer, sizeof(buffer))) > 0;) request.body.append(buffer, n);
  int status = 200;
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back(std::move(request));
    ++held_;
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hold_; };
    mu_.Await(absl::Condition(&released));
    --held_;
    if (!script_.empty()) {
      status = script_.front();
      script_.pop_front();
    }
  }
  mg_printf(conn, "HTTP/1.1 %d Answer\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);
}

}  // namespace fleet::testing

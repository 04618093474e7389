#include "tests/testing/webhook_receiver.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/string_view.h"
#include "common/net/http_request_line.h"

namespace fleet::testing {
namespace {

constexpr size_t kMaxHead = 16 * 1024;
constexpr size_t kMaxBody = 4 * 1024 * 1024;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// One accepted connection, plain or TLS.
class Connection {
 public:
  Connection(int fd, SSL_CTX* ctx) : fd_(fd) {
    if (ctx != nullptr) ssl_ = SSL_new(ctx);
  }
  ~Connection() {
    if (ssl_ != nullptr) {
      if (handshaken_) SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool Handshake() {
    if (ssl_ == nullptr) return true;
    if (SSL_set_fd(ssl_, fd_) != 1) return false;
    handshaken_ = SSL_accept(ssl_) == 1;
    return handshaken_;
  }
  // Bytes read (0: the peer closed; < 0: an error).
  ssize_t Read(char* buf, size_t size) {
    if (ssl_ != nullptr) return SSL_read(ssl_, buf, static_cast<int>(size));
    ssize_t n;
    while ((n = read(fd_, buf, size)) < 0 && errno == EINTR) {
    }
    return n;
  }
  bool WriteAll(std::string_view data) {
    while (!data.empty()) {
      ssize_t n;
      if (ssl_ != nullptr) {
        n = SSL_write(ssl_, data.data(), static_cast<int>(data.size()));
      } else {
        while ((n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL)) < 0 && errno == EINTR) {
        }
      }
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

 private:
  const int fd_;
  SSL* ssl_ = nullptr;
  bool handshaken_ = false;
};

// Reads one request: its head (bounded) and the body its Content-Length names. False when the
// connection ends first or the request is malformed.
bool ReadRequest(Connection& conn, ReceivedRequest* request) {
  std::string data;
  size_t head_end = std::string::npos;
  char buf[4096];
  while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
    if (data.size() > kMaxHead) return false;
    const ssize_t n = conn.Read(buf, sizeof(buf));
    if (n <= 0) return false;
    data.append(buf, static_cast<size_t>(n));
  }
  const absl::string_view head = absl::string_view(data).substr(0, head_end);
  if (!net::ParseRequestLine(AsStd(head), &request->method, &request->path)) return false;
  size_t length = 0;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    if (first) {
      first = false;
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return false;
    const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (name == "content-length" && (!absl::SimpleAtoi(value, &length) || length > kMaxBody)) {
      return false;
    }
    request->headers[name] = value;
  }
  request->body = data.substr(head_end + 4);
  while (request->body.size() < length) {
    const ssize_t n = conn.Read(buf, sizeof(buf));
    if (n <= 0) return false;
    request->body.append(buf, static_cast<size_t>(n));
  }
  request->body.resize(length);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WebhookReceiver>> WebhookReceiver::Start(
    const std::string& tls_pem) {
  std::unique_ptr<WebhookReceiver> r(new WebhookReceiver());
  r->scheme_ = tls_pem.empty() ? "http" : "https";
  if (!tls_pem.empty()) {
    r->ssl_ctx_ = SSL_CTX_new(TLS_server_method());
    if (r->ssl_ctx_ == nullptr || SSL_CTX_set_min_proto_version(r->ssl_ctx_, TLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate_chain_file(r->ssl_ctx_, tls_pem.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(r->ssl_ctx_, tls_pem.c_str(), SSL_FILETYPE_PEM) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("webhook receiver: TLS with ", tls_pem, ": ", OpenSslError()));
    }
  }
  r->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (r->listen_fd_ < 0 || bind(r->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(r->listen_fd_, 64) != 0 ||
      getsockname(r->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("webhook receiver: listening on 127.0.0.1: ", std::strerror(errno)));
  }
  r->port_ = ntohs(addr.sin_port);
  r->accept_thread_ = std::thread([p = r.get()] { p->AcceptLoop(); });
  return r;
}

WebhookReceiver::~WebhookReceiver() {
  Release();
  stopping_ = true;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    // A client that sends nothing more would keep its worker reading: end its connection.
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
}

void WebhookReceiver::AcceptLoop() {
  while (!stopping_) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down by the destructor
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    open_.insert(fd);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
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

void WebhookReceiver::Serve(int fd) {
  {
    Connection conn(fd, ssl_ctx_);
    ReceivedRequest request;
    if (conn.Handshake() && ReadRequest(conn, &request)) {
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
      conn.WriteAll(absl::StrCat("HTTP/1.1 ", status,
                                 " Answer\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
    }
  }
  absl::MutexLock lock(&mu_);
  open_.erase(fd);
  close(fd);
}

}  // namespace fleet::testing

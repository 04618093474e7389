#include "daemon/metrics/tls_metrics_server.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"
#include "common/log/log.h"
#include "common/net/http_request_line.h"
#include "daemon/metrics/fleet_metrics.h"

namespace fleet::daemon {
namespace {

constexpr size_t kMaxHead = 8192;
constexpr int kMaxConnections = 16;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

void Reply(SSL* ssl, std::string_view status, std::string_view type, std::string_view body) {
  const std::string head =
      absl::StrCat("HTTP/1.1 ", AsAbsl(status), "\r\nContent-Type: ", AsAbsl(type),
                   "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  std::string all = head;
  all.append(body.data(), body.size());
  size_t done = 0;
  while (done < all.size()) {
    const int n = SSL_write(ssl, all.data() + done, static_cast<int>(all.size() - done));
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsMetricsServer>> TlsMetricsServer::Start(
    FleetMetrics* metrics, const std::string& host, const std::string& port,
    const std::string& cert_file, const std::string& key_file, const std::string& ca_file) {
  std::unique_ptr<TlsMetricsServer> s(new TlsMetricsServer());
  s->metrics_ = metrics;
  s->ctx_ = SSL_CTX_new(TLS_server_method());
  if (s->ctx_ == nullptr) return absl::InternalError("TLS: " + OpenSslError());
  SSL_CTX_set_min_proto_version(s->ctx_, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(s->ctx_, cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-cert ", cert_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(s->ctx_, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(s->ctx_) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-key ", key_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_load_verify_locations(s->ctx_, ca_file.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-ca ", ca_file, ": ", OpenSslError()));
  }
  SSL_CTX_set_verify(s->ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen ", host, ":", port, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      why = strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", host, ":", port, ": ", why));
  }
  s->listen_fd_ = fd;
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  TlsMetricsServer* raw = s.get();
  s->accept_ = std::thread([raw] { raw->AcceptLoop(); });
  return s;
}

TlsMetricsServer::~TlsMetricsServer() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }
  if (accept_.joinable()) accept_.join();
  std::map<uint64_t, std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (auto& [id, t] : workers) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

void TlsMetricsServer::AcceptLoop() {
  while (!stop_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (stop_ || (fds[1].revents & POLLIN)) return;
    // The threads of connections served are joined here (they have ended, or are ending).
    std::vector<std::thread> ended;
    {
      absl::MutexLock lock(&mu_);
      for (uint64_t id : finished_) {
        auto it = workers_.find(id);
        if (it == workers_.end()) continue;
        ended.push_back(std::move(it->second));
        workers_.erase(it);
      }
      finished_.clear();
    }
    for (std::thread& t : ended) t.join();
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    absl::MutexLock lock(&mu_);
    if (active_ >= kMaxConnections) {
      close(fd);
      continue;
    }
    ++active_;
    open_.insert(fd);
    const uint64_t id = next_id_++;
    workers_.emplace(id, std::thread([this, id, fd] { Serve(id, fd); }));
  }
}

void TlsMetricsServer::Serve(uint64_t id, int fd) {
  // Every read and write is bounded: a peer that stalls is dropped after 10 s.
  timeval limit{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  SSL* ssl = SSL_new(ctx_);
  if (ssl != nullptr && SSL_set_fd(ssl, fd) == 1 && SSL_accept(ssl) == 1) {
    std::string head;
    char buffer[1024];
    while (head.size() < kMaxHead && head.find("\r\n\r\n") == std::string::npos) {
      const int n = SSL_read(ssl, buffer, sizeof(buffer));
      if (n <= 0) break;
      head.append(buffer, static_cast<size_t>(n));
    }
    std::string method, path;
    if (head.find("\r\n\r\n") == std::string::npos) {
      if (head.size() >= kMaxHead)
        Reply(ssl, "431 Request Header Fields Too Large", "text/plain", "");
    } else if (!net::ParseRequestLine(head, &method, &path)) {
      Reply(ssl, "400 Bad Request", "text/plain", "bad request\n");
    } else if (method != "GET") {
      Reply(ssl, "405 Method Not Allowed", "text/plain", "GET only\n");
    } else if (path == "/metrics") {
      Reply(ssl, "200 OK", "text/plain; version=0.0.4", metrics_->Text());
    } else if (path == "/metrics/targets") {
      Reply(ssl, "200 OK", "application/json", metrics_->Targets());
    } else {
      Reply(ssl, "404 Not Found", "text/plain", "not found\n");
    }
    SSL_shutdown(ssl);
  }
  if (ssl != nullptr) SSL_free(ssl);
  absl::MutexLock lock(&mu_);
  open_.erase(fd);
  close(fd);
  --active_;
  finished_.push_back(id);
}

}  // namespace fleet::daemon

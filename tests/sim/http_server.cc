#include "tests/sim/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/errno_status.h"

namespace fleet::sim {
namespace {

constexpr size_t kMaxRequestBytes = 1 << 20;
constexpr size_t kMaxConnections = 256;

std::string PeerName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

// Writes all of `data` to a non-blocking socket, waiting for room when the buffer is full.
bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 5000) <= 0) return false;
  }
  return true;
}

std::string Serialize(const HttpResponse& r, bool close) {
  return absl::StrCat("HTTP/1.1 ", r.status, " ", ReasonPhrase(r.status),
                      "\r\nserver: uvicorn\r\ncontent-type: ", r.content_type,
                      "\r\ncontent-length: ", r.body.size(), close ? "\r\nconnection: close" : "",
                      "\r\n\r\n", r.body);
}

}  // namespace

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 413:
      return "Request Entity Too Large";
    default:
      return "Error";
  }
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Listen(const std::string& host, int port,
                                                               Handler handler,
                                                               AccessLog access_log,
                                                               int* bind_errno) {
  *bind_errno = 0;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    *bind_errno = EADDRNOTAVAIL;
    return absl::InvalidArgumentError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *bind_errno = errno;
    freeaddrinfo(found);
    return ErrnoToStatus(errno, "socket");
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int bound = bind(fd, found->ai_addr, found->ai_addrlen);
  const int bind_error = errno;
  freeaddrinfo(found);
  if (bound != 0 || listen(fd, 128) != 0) {
    *bind_errno = bound != 0 ? bind_error : errno;
    close(fd);
    return ErrnoToStatus(*bind_errno, absl::StrCat("bind ", host, ":", port));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(fd, std::move(handler), std::move(access_log)));
}

HttpServer::~HttpServer() {
  for (const Connection& c : connections_) close(c.fd);
  close(listen_fd_);
}

void HttpServer::Serve(const std::vector<int>& watched,
                       const std::function<bool(int fd)>& on_watched) {
  for (;;) {
    std::vector<pollfd> fds;
    for (int fd : watched) fds.push_back({fd, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Connection& c : connections_) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (size_t i = 0; i < watched.size(); ++i) {
      if (fds[i].revents != 0 && !on_watched(watched[i])) return;
    }
    if (fds[watched.size()].revents & POLLIN) Accept();
    // Connections answered in this round, by descriptor (Accept may have added new ones).
    std::vector<Connection> kept;
    for (size_t i = 0; i < connections_.size(); ++i) {
      const size_t slot = watched.size() + 1 + i;
      const bool polled = slot < fds.size() && fds[slot].fd == connections_[i].fd;
      if (polled && fds[slot].revents != 0 && !OnReadable(&connections_[i])) {
        close(connections_[i].fd);
        continue;
      }
      kept.push_back(std::move(connections_[i]));
    }
    connections_ = std::move(kept);
  }
}

void HttpServer::Accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: all accepted
    if (connections_.size() >= kMaxConnections) {
      close(fd);
      continue;
    }
    connections_.push_back({fd, PeerName(addr), ""});
  }
}

bool HttpServer::OnReadable(Connection* conn) {
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(conn->fd, buf, sizeof(buf), 0);
    if (n > 0) {
      conn->in.append(buf, static_cast<size_t>(n));
      if (conn->in.size() > kMaxRequestBytes) {
        HttpResponse too_big{413, "application/json", "{\"detail\":\"Request Entity Too Large\"}"};
        WriteAll(conn->fd, Serialize(too_big, true));
        return false;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;  // peer closed, or an error
  }
  bool close_after = false;
  while (AnswerOne(conn, &close_after)) {
    if (close_after) return false;
  }
  return true;
}

bool HttpServer::AnswerOne(Connection* conn, bool* close) {
  const size_t header_end = conn->in.find("\r\n\r\n");
  if (header_end == std::string::npos) return false;
  HttpRequest request;
  request.peer = conn->peer;
  std::vector<std::string> lines = absl::StrSplit(conn->in.substr(0, header_end), "\r\n");
  std::vector<std::string> start = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
  HttpResponse response;
  size_t body_length = 0;
  if (start.size() != 3 || start[2].rfind("HTTP/1.", 0) != 0) {
    response = {400, "application/json", "{\"detail\":\"Bad Request\"}"};
    *close = true;
  } else {
    request.method = start[0];
    request.target = start[1];
    request.version = start[2];
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      request.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    const std::string connection = absl::AsciiStrToLower(request.headers["connection"]);
    *close = connection == "close" || (request.version == "HTTP/1.0" && connection != "keep-alive");
    if (request.headers.count("transfer-encoding") != 0) {
      response = {411, "application/json", "{\"detail\":\"Length Required\"}"};
      *close = true;
    } else if (request.headers.count("content-length") != 0 &&
               !absl::SimpleAtoi(request.headers["content-length"], &body_length)) {
      response = {400, "application/json", "{\"detail\":\"Bad Request\"}"};
      *close = true;
    }
  }
  if (response.status == 200) {
    if (conn->in.size() < header_end + 4 + body_length) return false;  // body still coming
    request.body = conn->in.substr(header_end + 4, body_length);
    response = handler_(request);
  }
  conn->in.erase(0, std::min(conn->in.size(), header_end + 4 + body_length));
  if (access_log_ && !request.method.empty()) access_log_(request, response.status);
  if (!WriteAll(conn->fd, Serialize(response, *close))) *close = true;
  return true;
}

}  // namespace fleet::sim

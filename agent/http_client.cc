#include "agent/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/errno_status.h"
#include "common/base/string_view.h"
#include "common/base/unique_fd.h"

namespace fleet::agent {
namespace {

constexpr size_t kMaxBodyBytes = kMaxHttpBodyBytes;
// Reading stops here: headers and the body's first kMaxBodyBytes fit, the rest is not needed.
constexpr size_t kMaxResponseBytes = kMaxHttpResponseBytes;

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string text;  // "127.0.0.1:8000", "[::1]:8000"
};

// The addresses to try for `host`, in order. No resolver: see the header.
absl::StatusOr<std::vector<Address>> Addresses(const std::string& host, int port) {
  std::vector<std::string> literals = {host};
  if (absl::AsciiStrToLower(host) == "localhost") literals = {"127.0.0.1", "::1"};
  std::vector<Address> out;
  for (const std::string& literal : literals) {
    Address a;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    if (inet_pton(AF_INET, literal.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      a.length = sizeof(sockaddr_in);
      a.text = absl::StrCat(literal, ":", port);
    } else if (inet_pton(AF_INET6, literal.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      a.length = sizeof(sockaddr_in6);
      a.text = absl::StrCat("[", literal, "]:", port);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("host '", host, "': not an IP address or localhost"));
    }
    out.push_back(std::move(a));
  }
  return out;
}

int MillisecondsLeft(absl::Time deadline) {
  const absl::Duration left = deadline - fleet::SteadyNow();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1 << 30));
}

// Waits until `fd` has one of `events`, or the deadline passes (DeadlineExceeded: `what` timed
// out).
absl::Status WaitFor(int fd, short events, absl::Time deadline, absl::Duration timeout,
                     std::string_view what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, MillisecondsLeft(deadline));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(AsAbsl(what), ": timed out after ", absl::FormatDuration(timeout)));
    }
    if (errno != EINTR) return ErrnoToStatus(errno, "poll");
  }
}

absl::StatusOr<UniqueFd> Connect(const Address& address, absl::Time deadline,
                                 absl::Duration timeout) {
  UniqueFd fd(socket(address.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket");
  const std::string what = absl::StrCat("connect ", address.text);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0) {
    if (errno != EINPROGRESS) return ErrnoToStatus(errno, what);
    if (absl::Status s = WaitFor(fd.get(), POLLOUT, deadline, timeout, what); !s.ok()) return s;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return ErrnoToStatus(err, what);
  }
  return fd;
}

// The chunked body at the start of `in`: true with `*body` once the last chunk is there (or
// `partial_ok`: with what there is), false while more is needed.
absl::StatusOr<bool> DecodeChunked(std::string_view in, bool partial_ok, std::string* body) {
  body->clear();
  size_t pos = 0;
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) break;
    std::string_view size_text = in.substr(pos, eol - pos);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(AsAbsl(size_text)), &size) ||
        size > kMaxResponseBytes * 1024) {
      return absl::UnavailableError("answer with a bad chunk size");
    }
    if (size == 0) return true;  // trailers are not needed
    if (in.size() < eol + 2 + size + 2) {
      if (partial_ok) body->append(in.substr(eol + 2, size));
      break;
    }
    body->append(in.substr(eol + 2, size));
    pos = eol + 2 + size + 2;
  }
  return partial_ok;
}

}  // namespace

absl::StatusOr<bool> ParseHttpResponse(std::string_view in, bool closed, bool capped,
                                       HttpResponse* out) {
  while (true) {
    const size_t head_end = in.find("\r\n\r\n");
    if (head_end == std::string_view::npos) {
      if (!closed && !capped) return false;
      if (capped) {
        return absl::UnavailableError(
            absl::StrCat("answer headers larger than ", kMaxResponseBytes >> 10, " KiB"));
      }
      return absl::UnavailableError(in.empty() ? "connection closed without an answer"
                                               : "connection closed in the answer's headers");
    }
    const std::string_view head = in.substr(0, head_end);
    const std::string_view status_line = head.substr(0, head.find("\r\n"));
    int status = 0;
    // "HTTP/1.1 200 OK", the reason phrase optional.
    if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ' ||
        (status_line.size() > 12 && status_line[12] != ' ') ||
        !absl::SimpleAtoi(AsAbsl(status_line.substr(9, 3)), &status) || status < 100) {
      return absl::UnavailableError(
          absl::StrCat("not an HTTP answer: '",
                       AsAbsl(status_line.substr(0, std::min<size_t>(40, head_end))), "'"));
    }
    in.remove_prefix(head_end + 4);
    if (status < 200) continue;  // 100 Continue and other interim answers: the real one follows

    std::optional<uint64_t> length;
    bool chunked = false;
    std::string_view fields = head.substr(status_line.size());
    while (!fields.empty()) {
      fields.remove_prefix(std::min<size_t>(2, fields.size()));  // the "\r\n" before each line
      const std::string_view line = fields.substr(0, fields.find("\r\n"));
      fields.remove_prefix(line.size());
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string name = absl::AsciiStrToLower(AsAbsl(line.substr(0, colon)));
      const absl::string_view value = absl::StripAsciiWhitespace(AsAbsl(line.substr(colon + 1)));
      if (name == "content-length") {
        uint64_t n = 0;
        if (!absl::SimpleAtoi(value, &n)) return absl::UnavailableError("bad Content-Length");
        length = n;
      } else if (name == "transfer-encoding") {
        chunked = absl::StrContains(absl::AsciiStrToLower(value), "chunked");
      }
    }
    out->status = status;
    out->body.clear();
    if (status == 204 || status == 304) return true;
    if (chunked) {
      absl::StatusOr<bool> done = DecodeChunked(in, capped, &out->body);
      if (done.ok() && !*done && closed) {
        return absl::UnavailableError("connection closed in a chunked body");
      }
      if (done.ok() && *done && out->body.size() > kMaxBodyBytes) out->body.resize(kMaxBodyBytes);
      return done;
    }
    if (length.has_value() && in.size() < *length && !capped) {
      if (!closed) return false;
      return absl::UnavailableError(
          absl::StrCat("connection closed after ", in.size(), " of ", *length, " body bytes"));
    }
    if (!length.has_value() && !closed && !capped) return false;  // the body ends with the close
    out->body =
        std::string(in.substr(0, std::min<uint64_t>(length.value_or(in.size()), kMaxBodyBytes)));
    return true;
  }
}

namespace {

// Sends `request` on the connected `fd` and reads the answer.
absl::StatusOr<HttpResponse> Exchange(int fd, const Address& address, const std::string& request,
                                      absl::Time deadline, absl::Duration timeout) {
  for (size_t done = 0; done < request.size();) {
    const ssize_t n = send(fd, request.data() + done, request.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status s =
          WaitFor(fd, POLLOUT, deadline, timeout, absl::StrCat("send to ", address.text));
      if (!s.ok()) return s;
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, absl::StrCat("send to ", address.text));
    }
  }
  std::string in;
  char buffer[16 << 10];
  while (true) {
    absl::Status s =
        WaitFor(fd, POLLIN, deadline, timeout, absl::StrCat("answer from ", address.text));
    if (!s.ok()) return s;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return ErrnoToStatus(errno, absl::StrCat("receive from ", address.text));
    }
    in.append(buffer, static_cast<size_t>(n));
    HttpResponse response;
    absl::StatusOr<bool> done = ParseHttpResponse(
        in, /*closed=*/n == 0, /*capped=*/in.size() >= kMaxResponseBytes, &response);
    if (!done.ok()) {
      return absl::Status(done.status().code(),
                          absl::StrCat(address.text, ": ", done.status().message()));
    }
    if (*done) return response;
  }
}

}  // namespace

absl::StatusOr<HttpResponse> SendHttpRequest(const HttpRequest& request, absl::Duration timeout) {
  const absl::Time deadline = fleet::SteadyNow() + timeout;
  if (request.path.empty() || request.path[0] != '/' ||
      std::any_of(request.path.begin(), request.path.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
    return absl::InvalidArgumentError(absl::StrCat("path '", request.path, "': not an HTTP path"));
  }
  if (request.port < 1 || request.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", request.port, ": not 1..65535"));
  }
  absl::StatusOr<std::vector<Address>> addresses = Addresses(request.host, request.port);
  if (!addresses.ok()) return addresses.status();

  const std::string host_field = request.host.find(':') == std::string::npos
                                     ? absl::StrCat(request.host, ":", request.port)
                                     : absl::StrCat("[", request.host, "]:", request.port);
  std::string text =
      absl::StrCat(request.method, " ", request.path, " HTTP/1.1\r\nHost: ", host_field,
                   "\r\nAccept: */*\r\nConnection: close\r\n");
  if (!request.content_type.empty()) {
    absl::StrAppend(&text, "Content-Type: ", request.content_type, "\r\n");
  }
  if (!request.body.empty() || request.method == "POST") {
    absl::StrAppend(&text, "Content-Length: ", request.body.size(), "\r\n");
  }
  absl::StrAppend(&text, "\r\n", request.body);

  // localhost is two addresses: when one cannot be connected to, the next is tried, as curl does.
  absl::Status last;
  for (const Address& address : *addresses) {
    absl::StatusOr<UniqueFd> fd = Connect(address, deadline, timeout);
    if (fd.ok()) return Exchange(fd->get(), address, text, deadline, timeout);
    last = fd.status();
    if (absl::IsDeadlineExceeded(last)) break;
  }
  return last;
}

}  // namespace fleet::agent

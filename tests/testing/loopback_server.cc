#include "tests/testing/loopback_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

namespace fleet::testing {

LoopbackServer::LoopbackServer(std::function<bool(int conn)> serve) : serve_(std::move(serve)) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::abort();  // a test machine without loopback: nothing here can work
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] {
    while (true) {
      const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // shut down
      }
      const bool more = serve_(conn);
      close(conn);
      if (!more) return;
    }
  });
}

LoopbackServer::~LoopbackServer() {
  shutdown(fd_, SHUT_RDWR);  // wakes accept(), and a serve that polls listen_fd()
  thread_.join();
  close(fd_);
}

std::string ReadHttpRequest(int conn) {
  std::string in;
  char buffer[4096];
  size_t want = std::string::npos;
  while (in.size() < want) {
    const ssize_t n = read(conn, buffer, sizeof(buffer));
    if (n <= 0) break;
    in.append(buffer, static_cast<size_t>(n));
    const size_t end = in.find("\r\n\r\n");
    if (want == std::string::npos && end != std::string::npos) {
      const size_t cl = in.find("Content-Length: ");
      want = end + 4 + (cl < end ? std::strtoul(in.c_str() + cl + 16, nullptr, 10) : 0);
    }
  }
  return in;
}

bool WriteAll(int conn, std::string_view data, size_t piece) {
  while (!data.empty()) {
    const ssize_t n = send(conn, data.data(), std::min(piece, data.size()), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace fleet::testing

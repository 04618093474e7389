// A loopback TCP server for tests that need a real peer (an HTTP endpoint for readiness probes,
// a server that answers badly): 127.0.0.1 on a port the kernel picks, one thread that accepts
// connections one at a time and hands each to the test's `serve`, then closes it. `serve`
// returns false to stop accepting. Stopped (the listening socket shut down, the thread joined) on
// destruction. ReadHttpRequest and WriteAll are the pieces the HTTP servers of the tests share.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace fleet::testing {

class LoopbackServer {
 public:
  explicit LoopbackServer(std::function<bool(int conn)> serve);
  ~LoopbackServer();
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  int port() const { return port_; }
  // Readable (POLLIN) once the server is being destroyed: a `serve` that waits on a connection
  // polls it too.
  int listen_fd() const { return fd_; }

 private:
  std::function<bool(int)> serve_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// One HTTP request from `conn`: its headers and, with a Content-Length, its body. What was read
// when the peer closed early or an error came.
std::string ReadHttpRequest(int conn);

// Writes `data` in pieces of at most `piece` bytes. False when the peer is gone.
bool WriteAll(int conn, std::string_view data, size_t piece = static_cast<size_t>(-1));

}  // namespace fleet::testing

#include "agent/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback_server.h"

namespace fleet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A loopback server (port 0) that answers each connection with the next scripted raw reply,
// written in pieces of `piece` bytes, and records each request (headers and body). With
// `keep_open`, it leaves the connection open after its reply until the client closes it, as a
// keep-alive server that ignores `Connection: close` would. An empty reply answers nothing.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::string> replies, bool keep_open = false,
                          size_t piece = 1 << 20)
      : replies_(std::move(replies)),
        keep_open_(keep_open),
        piece_(piece),
        server_([this](int conn) { return Serve(conn); }) {}

  int port() const { return server_.port(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  // The next reply; false after the last (no more connections accepted).
  bool Serve(int conn) {
    const std::string& reply = replies_[next_++];
    std::string in = fleet::testing::ReadHttpRequest(conn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(std::move(in));
    }
    fleet::testing::WriteAll(conn, reply, piece_);
    // Until the client hangs up: a reply that never comes, or a connection kept open.
    if (keep_open_ || reply.empty()) WaitForHangUp(conn);
    return next_ < replies_.size();
  }

  void WaitForHangUp(int conn) {
    // The listening socket's shutdown at destruction also ends the wait.
    pollfd fds[2] = {{conn, POLLIN, 0}, {server_.listen_fd(), POLLIN, 0}};
    char c;
    while (poll(fds, 2, -1) > 0) {
      if (fds[1].revents != 0) return;
      if (read(conn, &c, 1) <= 0) return;
    }
  }

  const std::vector<std::string> replies_;
  const bool keep_open_;
  const size_t piece_;
  size_t next_ = 0;  // the server's thread only
  std::mutex mu_;
  std::vector<std::string> requests_;
  fleet::testing::LoopbackServer server_;  // last: stopped first
};

HttpRequest Get(int port, const std::string& path) {
  HttpRequest r;
  r.port = port;
  r.path = path;
  return r;
}

TEST(HttpClient, ReadsALengthFramedAnswerWithoutWaitingForTheClose) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"}, /*keep_open=*/true);
  absl::StatusOr<HttpResponse> r =
      SendHttpRequest(Get(server.port(), "/health"), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  ASSERT_EQ(server.requests().size(), 1u);
  const std::string request = server.requests()[0];
  EXPECT_THAT(request, StartsWith("GET /health HTTP/1.1\r\n"));
  EXPECT_THAT(request, HasSubstr(absl::StrCat("\r\nHost: 127.0.0.1:", server.port(), "\r\n")));
  EXPECT_THAT(request, HasSubstr("\r\nConnection: close\r\n"));
}

TEST(HttpClient, DecodesAChunkedBodyArrivingByteByByte) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "4\r\n{\"id\r\n6;ext=1\r\n\":\"x\"}\r\n0\r\n\r\n"},
                        /*keep_open=*/true, /*piece=*/1);
  absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(server.port(), "/"), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, R"({"id":"x"})");
}

TEST(HttpClient, SkipsAnInterimAnswer) {
  ScriptedServer server(
      {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\n"
       "Content-Length: 7\r\n\r\nloading"});
  absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(server.port(), "/"), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "loading");
}

TEST(HttpClient, ABodyWithoutLengthEndsWithTheConnection) {
  ScriptedServer server({"HTTP/1.0 200 OK\r\n\r\nall of it"});
  absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(server.port(), "/"), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "all of it");
}

TEST(HttpClient, APostCarriesItsBodyTypeAndLength) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"});
  HttpRequest request = Get(server.port(), "/v1/completions");
  request.host = "localhost";
  request.method = "POST";
  request.content_type = "application/json";
  request.body = R"({"max_tokens":1})";
  absl::StatusOr<HttpResponse> r = SendHttpRequest(request, absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(server.requests().size(), 1u);
  const std::string sent = server.requests()[0];
  EXPECT_THAT(sent, StartsWith("POST /v1/completions HTTP/1.1\r\n"));
  EXPECT_THAT(sent, HasSubstr("\r\nContent-Type: application/json\r\n"));
  EXPECT_THAT(sent, HasSubstr("\r\nContent-Length: 16\r\n"));
  EXPECT_THAT(sent, HasSubstr("\r\n\r\n{\"max_tokens\":1}"));
}

TEST(HttpClient, AConnectionClosedBeforeTheWholeBodyIsAnError) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"});
  absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(server.port(), "/"), absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("after 5 of 10 body bytes"));
}

TEST(HttpClient, AnAnswerThatIsNotHttpIsAnError) {
  ScriptedServer server({"SSH-2.0-OpenSSH_9.2\r\n\r\n"});
  absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(server.port(), "/"), absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("not an HTTP answer: 'SSH-2.0"));
}

TEST(HttpClient, ASilentServerTimesOut) {
  ScriptedServer server({""});
  absl::StatusOr<HttpResponse> r =
      SendHttpRequest(Get(server.port(), "/"), absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_THAT(r.status().message(),
              HasSubstr(absl::StrCat("answer from 127.0.0.1:", server.port(), ": timed out")));
}

TEST(HttpClient, ARefusedConnectionIsUnavailableAndNamesTheAddress) {
  // Bound but not listening: connections are refused, and no other process can take the port.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(port, "/"), absl::Seconds(10));
  close(fd);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("connect 127.0.0.1:", port)));
}

TEST(HttpClient, ResolvesNoNames) {
  HttpRequest request = Get(80, "/");
  request.host = "example.com";
  absl::StatusOr<HttpResponse> r = SendHttpRequest(request, absl::Seconds(1));
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("not an IP address or localhost"));
}

TEST(HttpClient, RefusesAPathThatWouldBreakTheRequest) {
  for (const char* path : {"", "health", "/a b", "/a\r\nX-Evil: 1"}) {
    absl::StatusOr<HttpResponse> r = SendHttpRequest(Get(80, path), absl::Seconds(1));
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << path << ": " << r.status();
  }
}

}  // namespace
}  // namespace fleet::agent

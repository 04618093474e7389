// HttpServer: the simulated server's HTTP/1.1 endpoint, hand-rolled because it is a simulator: one
// thread, poll(2), keep-alive, Content-Length bodies only, small requests. It serves until a
// watched descriptor (the launcher's signalfd, its schedulers' pipes) says to stop, so the
// launcher reacts to SIGTERM or a dead child while serving. Not thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::sim {

struct HttpRequest {
  std::string method;
  std::string target;                          // "/health_generate"
  std::string version;                         // "HTTP/1.1"
  std::map<std::string, std::string> headers;  // names lower case
  std::string body;
  std::string peer;  // "127.0.0.1:54321"
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  using AccessLog = std::function<void(const HttpRequest&, int status)>;

  // Binds host:port (SO_REUSEADDR, as uvicorn) and listens. On failure `*bind_errno` holds the
  // errno (EADDRINUSE for a port in use) and the status says what failed.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Listen(const std::string& host, int port,
                                                            Handler handler, AccessLog access_log,
                                                            int* bind_errno);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves requests until `on_watched(fd)`, called when one of `watched` is readable or hung up,
  // returns false.
  void Serve(const std::vector<int>& watched, const std::function<bool(int fd)>& on_watched);

 private:
  struct Connection {
    int fd;
    std::string peer;
    std::string in;
  };

  HttpServer(int listen_fd, Handler handler, AccessLog access_log)
      : listen_fd_(listen_fd), handler_(std::move(handler)), access_log_(std::move(access_log)) {}

  void Accept();
  // Reads what is there and answers every complete request; false when the connection is done.
  bool OnReadable(Connection* conn);
  // Answers the first complete request in conn->in; false when there is none yet. Sets *close
  // when the connection must close after the answer.
  bool AnswerOne(Connection* conn, bool* close);

  int listen_fd_;
  Handler handler_;
  AccessLog access_log_;
  std::vector<Connection> connections_;
};

// The reason phrase of an HTTP status ("OK", "Not Found").
const char* ReasonPhrase(int status);

}  // namespace fleet::sim

// SendHttpRequest: one HTTP/1.1 request over a new plain TCP connection, for readiness checks of
// a server in the same container. It is the whole of fleet-http-probe's networking, small so that
// the helper links fully static (no libcurl, whose dependencies Debian ships no archives of) and
// runs in the users' older containers.
//
// What it supports is what readiness needs: http:// only (no TLS, no proxy, no redirects), a
// numeric host, `Connection: close`, answers framed by Content-Length, chunked encoding or the
// end of the connection, interim 1xx answers skipped. The host is an IPv4 or IPv6 address or
// `localhost` (127.0.0.1, then ::1), never a name to resolve: name lookups in a static binary go
// through the container's NSS modules, which a static glibc cannot load safely (agent/CMakeLists).
//
// Thread-safe: no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fleet::agent {

struct HttpRequest {
  std::string host = "127.0.0.1";  // an IP address or "localhost"
  int port = 80;
  std::string method = "GET";
  std::string path = "/";    // starts with '/', no spaces or control characters
  std::string content_type;  // a Content-Type header when not empty
  std::string body;          // sent with a Content-Length (always for POST)
};

struct HttpResponse {
  int status = 0;
  std::string body;  // the first 64 KiB of the body (decoded when chunked)
};

// The parser SendHttpRequest runs on what it received so far (exposed for its fuzz target,
// tests/fuzz/http_response_fuzzer.cc): true with `*out` once a whole answer is there, false
// while more is needed. `closed`: the peer closed the connection, nothing more will come.
// `capped`: the reader stopped reading (at kMaxHttpResponseBytes), what there is is all there
// will be. Unavailable for an answer that is not HTTP or is cut short. `out->body` holds at most
// kMaxHttpBodyBytes.
inline constexpr size_t kMaxHttpBodyBytes = 64 << 10;
inline constexpr size_t kMaxHttpResponseBytes = 2 * kMaxHttpBodyBytes;
absl::StatusOr<bool> ParseHttpResponse(std::string_view in, bool closed, bool capped,
                                       HttpResponse* out);

// Sends `request` and reads the answer, all within `timeout` (connect, send and receive
// together). Errors name the address: InvalidArgument for a bad request (a host that is no
// address, a bad path), DeadlineExceeded when the time ran out, Unavailable for a refused or
// broken connection or an answer that is not HTTP.
absl::StatusOr<HttpResponse> SendHttpRequest(const HttpRequest& request, absl::Duration timeout);

}  // namespace fleet::agent

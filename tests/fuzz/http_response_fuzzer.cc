// libFuzzer target for the readiness HTTP parser (agent/http_client.h, ParseHttpResponse) and, on
// the same bytes, the TLS metrics listener's request line (common/net/http_request_line.h): the
// answer of a server under test is untrusted input (fleet-http-probe reads whatever listens on the
// port). Its first bytes choose where the rest is cut into the pieces recv() would return; the
// parser is run on each prefix as SendHttpRequest runs it, then on the whole with the connection
// closed, and at the cap. Invariants: no crash or unbounded memory; an answer that is done has a
// final status (200..999) and at most kMaxHttpBodyBytes of body; once done on a prefix, the same
// answer on the whole; a closed connection is always decided (done or an error).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/http_client.h"
#include "common/net/http_request_line.h"

namespace fleet::agent {
namespace {

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "invariant broken: %s (%zu input bytes)\n", what, input.size());
  std::abort();
}

void CheckDone(const HttpResponse& r, std::string_view input) {
  if (r.status < 200 || r.status > 999) Fail("a finished answer with a non-final status", input);
  if (r.body.size() > kMaxHttpBodyBytes) Fail("a body past kMaxHttpBodyBytes", input);
}

}  // namespace
}  // namespace fleet::agent

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fleet::agent::HttpResponse;
  using fleet::agent::ParseHttpResponse;
  constexpr size_t kScheduleBytes = 2;
  if (size < kScheduleBytes) return 0;
  const size_t step = 1 + (static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8);
  {
    // The same bytes as a request head for fleetd's TLS metrics listener (common/net): a line it
    // takes has a method without spaces and a path starting with '/'.
    const std::string_view head(reinterpret_cast<const char*>(data), size);
    std::string method, path;
    if (fleet::net::ParseRequestLine(head, &method, &path) &&
        (method.empty() || path.empty() || path[0] != '/' ||
         method.find(' ') != std::string::npos)) {
      std::fprintf(stderr, "invariant broken: a request line taken with a bad method or path\n");
      std::abort();
    }
  }
  std::string_view input(reinterpret_cast<const char*>(data + kScheduleBytes),
                         size - kScheduleBytes);
  if (input.size() > fleet::agent::kMaxHttpResponseBytes) {
    input = input.substr(0, fleet::agent::kMaxHttpResponseBytes);
  }

  // As the reader does: parse after each piece, stop at the first answer or error.
  bool decided = false;
  HttpResponse first;
  for (size_t end = std::min(step, input.size()); !decided;
       end = std::min(end + step, input.size())) {
    const bool capped = end >= fleet::agent::kMaxHttpResponseBytes;
    HttpResponse r;
    absl::StatusOr<bool> done = ParseHttpResponse(input.substr(0, end), false, capped, &r);
    if (!done.ok() || *done) {
      decided = true;
      if (done.ok()) {
        fleet::agent::CheckDone(r, input);
        first = r;
        // More bytes after a finished answer change nothing already decided: its status stays.
        HttpResponse again;
        absl::StatusOr<bool> whole = ParseHttpResponse(input, true, false, &again);
        if (whole.ok() && *whole && again.status != first.status) {
          fleet::agent::Fail("a finished answer's status changed with more input", input);
        }
      }
    }
    if (end == input.size()) break;
  }
  // The connection closed after everything: always decided.
  HttpResponse closed;
  absl::StatusOr<bool> at_close = ParseHttpResponse(input, true, false, &closed);
  if (at_close.ok() && !*at_close)
    fleet::agent::Fail("undecided after the connection closed", input);
  if (at_close.ok()) fleet::agent::CheckDone(closed, input);
  HttpResponse capped;
  absl::StatusOr<bool> at_cap = ParseHttpResponse(input, false, true, &capped);
  if (at_cap.ok() && !*at_cap) fleet::agent::Fail("undecided at the cap", input);
  if (at_cap.ok()) fleet::agent::CheckDone(capped, input);
  return 0;
}

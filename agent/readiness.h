// Readiness: can the server serve? A ready line in the log is only a hint; READY is an HTTP
// answer. SGLang: GET /health_generate returns 200 (it runs a real generation). vLLM: GET /health
// returns 200, then a one-token completion succeeds (POST /v1/completions for the model that
// GET /v1/models names). Checks block for up to their timeouts: callers run them off their event
// loop. ReadinessProber is the seam.
//
// The agent's prober is ProcessReadinessProber: each check runs fleet-http-probe, a small program
// that makes the requests (HttpReadinessProber, http_readiness_prober.h), so that a check that
// hangs or crashes costs a short-lived process, never the long-lived agent.
//
// Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/command_runner.h"

namespace fleet::agent {

struct ReadinessCheck {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string path = "/health_generate";
  bool completion_check = false;              // vLLM: a one-token completion after the health check
  absl::Duration timeout = absl::Seconds(5);  // per HTTP request
};

struct ReadinessResult {
  bool ready = false;
  int http_status = 0;  // of the last request made; 0 when none got an answer
  std::string detail;   // why not ready: "connection refused", "HTTP 503", ...
};

class ReadinessProber {
 public:
  virtual ~ReadinessProber() = default;
  virtual ReadinessResult Check(const ReadinessCheck& check) = 0;
};

// Runs the helper program `helper` through `runner` for every check:
//
//   fleet-http-probe --host H --port N --path P --timeout-ms MS [--completion-check]
//
// with a minimal environment, killed if it outlives the requests' timeouts by more than a few
// seconds. The helper prints one line, `ready STATUS` (exit 0) or `not-ready STATUS DETAIL`
// (exit 1), STATUS being the HTTP status of the last request (0: no answer); exit 2 is a usage
// error. A helper that cannot be started, crashes, times out or answers otherwise makes the
// server not ready, with the reason in the detail.
class ProcessReadinessProber : public ReadinessProber {
 public:
  // `runner` must outlive the prober.
  ProcessReadinessProber(std::string helper, CommandRunner* runner);
  ReadinessResult Check(const ReadinessCheck& check) override;

  // fleet-http-probe in the directory of the running executable ("" when /proc/self/exe cannot
  // be read).
  static std::string HelperNextToExecutable();

 private:
  const std::string helper_;
  CommandRunner* const runner_;
};

// The helper's line (its first line; a trailing newline is allowed) as a result. InvalidArgument
// when it is not one.
absl::StatusOr<ReadinessResult> ParseReadinessLine(std::string_view line);

}  // namespace fleet::agent

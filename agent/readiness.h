// Readiness: can the server serve? A ready line in the log is only a hint; READY is an HTTP
// answer. SGLang: GET /health_generate returns 200 (it runs a real generation). vLLM: GET /health
// returns 200, then a one-token completion succeeds (POST /v1/completions for the model that
// GET /v1/models names). libcurl, blocking with short timeouts: callers run it off their event
// loop. ReadinessProber is the seam. Thread-safe.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace fleet::agent {

struct ReadinessCheck {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string path = "/health_generate";
  bool completion_check = false;  // vLLM: a one-token completion after the health check
  absl::Duration timeout = absl::Seconds(5);
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

class CurlReadinessProber : public ReadinessProber {
 public:
  CurlReadinessProber();
  ReadinessResult Check(const ReadinessCheck& check) override;
};

}  // namespace fleet::agent

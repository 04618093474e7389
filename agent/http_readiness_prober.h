// HttpReadinessProber: the HTTP side of readiness (readiness.h), with SendHttpRequest
// (http_client.h; blocking, each request bounded by the check's timeout). SGLang: GET the health
// path (/health_generate runs a real generation) and expect 200. vLLM: GET /health, then a
// one-token completion (POST /v1/completions for the model GET /v1/models names).
//
// fleet-http-probe runs it, once per process, for fleet-agent (ProcessReadinessProber,
// readiness.h); tests use it directly.
//
// Thread-safe: no state.
#pragma once

#include "agent/readiness.h"

namespace fleet::agent {

class HttpReadinessProber : public ReadinessProber {
 public:
  ReadinessResult Check(const ReadinessCheck& check) override;
};

}  // namespace fleet::agent

// CurlReadinessProber: the HTTP client behind readiness, with libcurl (blocking, short timeouts).
// SGLang: GET the health path (/health_generate runs a real generation) and expect 200. vLLM: GET
// /health, then a one-token completion (POST /v1/completions for the model GET /v1/models names).
//
// fleet-agent does not link it: libcurl and the libraries it brings (TLS, Kerberos, LDAP, ...)
// would stay mapped in the long-lived agent for a few probes. fleet-http-probe links it and the
// agent runs that program (ProcessReadinessProber, readiness.h); tests use it directly.
//
// Thread-safe.
#pragma once

#include "agent/readiness.h"

namespace fleet::agent {

class CurlReadinessProber : public ReadinessProber {
 public:
  CurlReadinessProber();
  ReadinessResult Check(const ReadinessCheck& check) override;
};

}  // namespace fleet::agent

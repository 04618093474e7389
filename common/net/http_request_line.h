// The request line of an HTTP/1.x request head ("GET /metrics HTTP/1.1\r\n..."), as fleetd's TLS
// metrics listener reads it (daemon/metrics/tls_metrics_server.h): its method and its path
// without the query. False for anything else: no version 1.0 or 1.1, a target not starting with
// '/', a control character. Pure; fuzzed (tests/fuzz/http_response_fuzzer.cc).
#pragma once

#include <string>
#include <string_view>

namespace fleet::net {

bool ParseRequestLine(std::string_view head, std::string* method, std::string* path);

}  // namespace fleet::net

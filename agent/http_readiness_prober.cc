#include "agent/http_readiness_prober.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "agent/http_client.h"

namespace fleet::agent {
namespace {

// The first "id" of an OpenAI-style /v1/models answer; "" when there is none.
std::string FirstModelId(const std::string& body) {
  const size_t key = body.find("\"id\"");
  if (key == std::string::npos) return "";
  const size_t open = body.find('"', body.find(':', key) + 1);
  const size_t close = open == std::string::npos ? open : body.find('"', open + 1);
  if (close == std::string::npos) return "";
  return body.substr(open + 1, close - open - 1);
}

std::string JsonEscaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}

}  // namespace

ReadinessResult HttpReadinessProber::Check(const ReadinessCheck& check) {
  ReadinessResult result;
  HttpRequest request;
  request.host = check.host;
  request.port = check.port;
  request.path = check.path;
  absl::StatusOr<HttpResponse> health = SendHttpRequest(request, check.timeout);
  if (!health.ok()) {
    result.detail = absl::StrCat("GET ", check.path, ": ", health.status().message());
    return result;
  }
  result.http_status = health->status;
  if (health->status != 200) {
    result.detail = absl::StrCat("GET ", check.path, ": HTTP ", health->status);
    return result;
  }
  if (check.completion_check) {
    request.path = "/v1/models";
    absl::StatusOr<HttpResponse> models = SendHttpRequest(request, check.timeout);
    const std::string model =
        models.ok() && models->status == 200 ? FirstModelId(models->body) : "";
    request.method = "POST";
    request.path = "/v1/completions";
    request.content_type = "application/json";
    request.body = absl::StrCat(
        "{", model.empty() ? "" : absl::StrCat("\"model\":\"", JsonEscaped(model), "\","),
        "\"prompt\":\"Hello\",\"max_tokens\":1}");
    absl::StatusOr<HttpResponse> completion = SendHttpRequest(request, check.timeout);
    if (!completion.ok()) {
      result.http_status = 0;
      result.detail = absl::StrCat("POST /v1/completions: ", completion.status().message());
      return result;
    }
    result.http_status = completion->status;
    if (completion->status != 200) {
      result.detail = absl::StrCat("POST /v1/completions: HTTP ", completion->status);
      return result;
    }
  }
  result.ready = true;
  return result;
}

}  // namespace fleet::agent

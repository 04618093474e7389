#include "agent/curl_readiness_prober.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace fleet::agent {
namespace {

struct Reply {
  long status = 0;
  std::string body;
  std::string error;
};

size_t Collect(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  // A health answer is small; keep at most 64 KiB of it.
  const size_t bytes = size * n;
  if (body->size() < (64 << 10)) body->append(data, std::min(bytes, (64 << 10) - body->size()));
  return bytes;
}

Reply Request(const std::string& url, const std::string* post_json, absl::Duration timeout) {
  Reply reply;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    reply.error = "curl_easy_init failed";
    return reply;
  }
  char error[CURL_ERROR_SIZE] = {};
  curl_slist* headers = nullptr;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl.get(), CURLOPT_PROXY, "");  // never through a proxy from the environment
  if (post_json != nullptr) {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, post_json->c_str());
  }
  const CURLcode rc = curl_easy_perform(curl.get());
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    reply.error = error[0] != '\0' ? error : curl_easy_strerror(rc);
    return reply;
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

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

CurlReadinessProber::CurlReadinessProber() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

ReadinessResult CurlReadinessProber::Check(const ReadinessCheck& check) {
  ReadinessResult result;
  const std::string base = absl::StrCat("http://", check.host, ":", check.port);
  Reply health = Request(base + check.path, nullptr, check.timeout);
  result.http_status = static_cast<int>(health.status);
  if (!health.error.empty()) {
    result.detail = absl::StrCat("GET ", check.path, ": ", health.error);
    return result;
  }
  if (health.status != 200) {
    result.detail = absl::StrCat("GET ", check.path, ": HTTP ", health.status);
    return result;
  }
  if (check.completion_check) {
    Reply models = Request(base + "/v1/models", nullptr, check.timeout);
    const std::string model = models.status == 200 ? FirstModelId(models.body) : "";
    const std::string body = absl::StrCat(
        "{", model.empty() ? "" : absl::StrCat("\"model\":\"", JsonEscaped(model), "\","),
        "\"prompt\":\"Hello\",\"max_tokens\":1}");
    Reply completion = Request(base + "/v1/completions", &body, check.timeout);
    result.http_status = static_cast<int>(completion.status);
    if (!completion.error.empty() || completion.status != 200) {
      result.detail = completion.error.empty()
                          ? absl::StrCat("POST /v1/completions: HTTP ", completion.status)
                          : absl::StrCat("POST /v1/completions: ", completion.error);
      return result;
    }
  }
  result.ready = true;
  return result;
}

}  // namespace fleet::agent

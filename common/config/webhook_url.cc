#include "common/config/webhook_url.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fleet::config {
namespace {

bool Loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

}  // namespace

absl::Status CheckWebhookUrl(std::string_view url, WebhookUrl* parsed) {
  if (url.size() > 2048) return absl::InvalidArgumentError("longer than 2048 characters");
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("contains a space or a control character");
    }
  }
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return absl::InvalidArgumentError("no scheme (https://...)");
  WebhookUrl out;
  out.scheme = absl::AsciiStrToLower(std::string(url.substr(0, sep)));
  if (out.scheme != "https" && out.scheme != "http") {
    return absl::InvalidArgumentError(absl::StrCat("scheme '", out.scheme, "': https only"));
  }
  std::string_view rest = url.substr(sep + 3);
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos) {
    return absl::InvalidArgumentError("a user or password in the URL: use secret_file for a key");
  }
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("unclosed '[' in host");
    out.host = std::string(authority.substr(1, close - 1));
  } else {
    out.host = std::string(authority.substr(0, authority.find(':')));
  }
  if (out.host.empty()) return absl::InvalidArgumentError("no host");
  out.host = absl::AsciiStrToLower(out.host);
  if (out.scheme == "http" && !Loopback(out.host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "http:// to ", out.host, ": plain http only to a loopback address; use https"));
  }
  if (parsed != nullptr) *parsed = std::move(out);
  return absl::OkStatus();
}

}  // namespace fleet::config

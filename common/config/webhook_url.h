// A webhook's URL as fleetd accepts it (Notify.url): https, or http only to a loopback address
// (127.0.0.0/8, ::1, localhost: a relay on the same machine); no user:password part; at most 2 KiB.
// Checked when the config is loaded and again before each delivery. Pure.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace fleet::config {

struct WebhookUrl {
  std::string scheme;  // "https" or "http"
  std::string host;    // without brackets
};

absl::Status CheckWebhookUrl(std::string_view url, WebhookUrl* parsed = nullptr);

}  // namespace fleet::config

#include "common/config/webhook_url.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::config {
namespace {

using ::testing::HasSubstr;

std::string UrlErrorOf(const std::string& url) {
  const absl::Status s = CheckWebhookUrl(url);
  EXPECT_FALSE(s.ok()) << url;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << url;
  return std::string(s.message());
}

TEST(WebhookUrl, HttpsToAnyHostIsAccepted) {
  WebhookUrl parsed;
  ASSERT_TRUE(CheckWebhookUrl("https://hooks.example.com/services/T0/B0?x=1", &parsed).ok());
  EXPECT_EQ(parsed.scheme, "https");
  EXPECT_EQ(parsed.host, "hooks.example.com");
  ASSERT_TRUE(CheckWebhookUrl("HTTPS://Hooks.Example.COM:8443/x", &parsed).ok());
  EXPECT_EQ(parsed.scheme, "https");
  EXPECT_EQ(parsed.host, "hooks.example.com");
  ASSERT_TRUE(CheckWebhookUrl("https://[2001:db8::1]:443/x", &parsed).ok());
  EXPECT_EQ(parsed.host, "2001:db8::1");
}

TEST(WebhookUrl, PlainHttpOnlyToALoopbackAddress) {
  for (const char* url : {"http://127.0.0.1:8080/hook", "http://127.1.2.3/hook", "http://[::1]:9/x",
                          "http://localhost/hook", "http://LOCALHOST:1/"}) {
    EXPECT_TRUE(CheckWebhookUrl(url).ok()) << url;
  }
  EXPECT_EQ(UrlErrorOf("http://hooks.example.com/x"),
            "http:// to hooks.example.com: plain http only to a loopback address; use https");
  for (const char* url :
       {"http://10.0.0.1/x", "http://128.0.0.1/x", "http://[::2]/x",
        "http://localhost.example.com/x", "http://0.0.0.0/x", "http://127.0.0.1.example.com/x"}) {
    EXPECT_THAT(UrlErrorOf(url), HasSubstr("plain http only to a loopback address")) << url;
  }
}

TEST(WebhookUrl, UserAndPasswordAreRefused) {
  EXPECT_EQ(UrlErrorOf("https://user:pass@hooks.example.com/x"),
            "a user or password in the URL: use secret_file for a key");
  EXPECT_THAT(UrlErrorOf("http://user@127.0.0.1/x"), HasSubstr("a user or password"));
  // An '@' after the host is part of the path, not a user.
  EXPECT_TRUE(CheckWebhookUrl("https://hooks.example.com/a@b").ok());
}

TEST(WebhookUrl, ControlCharactersAndSpacesAreRefused) {
  for (const std::string& url :
       {std::string("https://hooks.example.com/a\nb"), std::string("https://hooks.example.com/a b"),
        std::string("https://hooks.example.com/\r\nX-Injected: 1"),
        std::string("https://hooks.example.com/\x7f"),
        std::string("https://hooks.example.com/a\tb"),
        std::string("https://hooks.example.com/a\0b", 28)}) {
    EXPECT_EQ(UrlErrorOf(url), "contains a space or a control character");
  }
}

TEST(WebhookUrl, OtherSchemesNoHostAndTooLongAreRefused) {
  EXPECT_EQ(UrlErrorOf("ftp://hooks.example.com/x"), "scheme 'ftp': https only");
  EXPECT_EQ(UrlErrorOf("file:///etc/passwd"), "scheme 'file': https only");
  EXPECT_EQ(UrlErrorOf("hooks.example.com/x"), "no scheme (https://...)");
  EXPECT_EQ(UrlErrorOf("https:///x"), "no host");
  EXPECT_EQ(UrlErrorOf("https://:443/x"), "no host");
  EXPECT_EQ(UrlErrorOf("https://[::1/x"), "unclosed '[' in host");
  EXPECT_EQ(UrlErrorOf("https://hooks.example.com/" + std::string(2048, 'a')),
            "longer than 2048 characters");
}

}  // namespace
}  // namespace fleet::config

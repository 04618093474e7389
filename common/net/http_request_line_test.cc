#include "common/net/http_request_line.h"

#include "gtest/gtest.h"

namespace fleet::net {
namespace {

TEST(ParseRequestLine, TakesTheMethodAndThePathWithoutItsQuery) {
  std::string method, path;
  ASSERT_TRUE(ParseRequestLine("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &method, &path));
  EXPECT_EQ(method, "GET");
  EXPECT_EQ(path, "/metrics");
  ASSERT_TRUE(ParseRequestLine("HEAD /metrics/targets?x=1 HTTP/1.0\r\n\r\n", &method, &path));
  EXPECT_EQ(method, "HEAD");
  EXPECT_EQ(path, "/metrics/targets");
}

TEST(ParseRequestLine, RefusesWhatIsNotAnHttp1RequestLine) {
  std::string method, path;
  for (const char* bad : {"", "GET", "GET /metrics", "GET /metrics HTTP/2\r\n",
                          "GET metrics HTTP/1.1\r\n", " /metrics HTTP/1.1\r\n", "GET  HTTP/1.1\r\n",
                          "GET /a\x01b HTTP/1.1\r\n", "GET /metrics HTTP/1.1 extra\r\n"}) {
    EXPECT_FALSE(ParseRequestLine(bad, &method, &path)) << bad;
  }
}

}  // namespace
}  // namespace fleet::net

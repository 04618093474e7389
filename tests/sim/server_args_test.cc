#include "tests/sim/server_args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ServerArgs, ParsesTheFlagsASupervisorPasses) {
  absl::StatusOr<ServerArgs> a = ParseServerArgs(
      {"--model-path", "/m", "--host", "0.0.0.0", "--port=31000", "--tp", "2",
       "--attention-backend", "triton", "--disable-cuda-graph", "--mem-fraction-static", "0.8",
       "--log-level", "warning", "--trust-remote-code", "--base-gpu-id", "3"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->model_path, "/m");
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 31000);
  EXPECT_EQ(a->tp_size, 2);
  EXPECT_EQ(a->attention_backend, "triton");
  EXPECT_TRUE(a->disable_cuda_graph);
  EXPECT_DOUBLE_EQ(a->mem_fraction_static, 0.8);
  EXPECT_EQ(a->log_level, "warning");
  EXPECT_TRUE(a->trust_remote_code);
  EXPECT_EQ(a->base_gpu_id, 3);
}

TEST(ServerArgs, ModelAliasAndTpSizeSpellings) {
  absl::StatusOr<ServerArgs> a = ParseServerArgs({"--model", "/m", "--tp-size", "4"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->model_path, "/m");
  EXPECT_EQ(a->tp_size, 4);
}

TEST(ServerArgs, UnknownFlagsAreListedLikeArgparse) {
  absl::StatusOr<ServerArgs> a = ParseServerArgs({"--model-path", "/m", "--foo", "bar"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), StartsWith("usage: launch_server.py [-h]"));
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("\nlaunch_server.py: error: unrecognized arguments: --foo bar\n"));
}

TEST(ServerArgs, BadValuesNameTheFlag) {
  EXPECT_THAT(
      std::string(ParseServerArgs({"--model-path", "/m", "--port", "x"}).status().message()),
      HasSubstr("error: argument --port: invalid int value: 'x'"));
  EXPECT_THAT(std::string(ParseServerArgs({"--model-path", "/m", "--port"}).status().message()),
              HasSubstr("error: argument --port: expected one argument"));
  EXPECT_THAT(
      std::string(
          ParseServerArgs({"--model-path", "/m", "--attention-backend", "x"}).status().message()),
      HasSubstr("argument --attention-backend: invalid choice: 'x' (choose from 'flashinfer'"));
  EXPECT_THAT(std::string(ParseServerArgs({"--port", "1"}).status().message()),
              HasSubstr("error: the following arguments are required: --model-path/--model"));
}

TEST(ServerArgs, ServerArgsRecordIsPythonRepr) {
  absl::StatusOr<ServerArgs> a = ParseServerArgs({"--model-path", "/m", "--port", "30001"});
  ASSERT_TRUE(a.ok());
  const std::string record = FormatServerArgs(*a);
  EXPECT_THAT(record, StartsWith("server_args=ServerArgs(model_path='/m', "));
  EXPECT_THAT(record, HasSubstr(", port=30001, "));
  EXPECT_THAT(record, HasSubstr("attention_backend=None, "));
  EXPECT_THAT(record, HasSubstr("disable_cuda_graph=False"));
}

}  // namespace
}  // namespace fleet::sim

// GrpcAgentClient over a real loopback gRPC channel against a scripted agent: the channel's
// message limits are the deliberate ones of common/base/rpc_limits.h, not gRPC's 4 MiB default
// (a Status from an agent with many failed servers must not cut a container off).
#include "daemon/agent_client.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/rpc_limits.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"

namespace fleet::daemon {
namespace {

// An agent whose Status answers with `bytes` of evidence.
class BigStatusAgent final : public fleet::v1::Agent::Service {
 public:
  explicit BigStatusAgent(size_t bytes) : bytes_(bytes) {}
  grpc::Status Status(grpc::ServerContext*, const fleet::v1::StatusRequest*,
                      fleet::v1::StatusResponse* response) override {
    response->set_incarnation("inc");
    auto* d = response->add_servers()->mutable_diagnosis();
    d->set_diagnosis_class("missing_shared_library");
    const std::string line(8192, 'x');
    for (size_t made = 0; made < bytes_; made += line.size()) {
      auto* e = d->add_evidence();
      e->set_line(static_cast<int64_t>(made / line.size()) + 1);
      e->set_text(line);
    }
    return grpc::Status::OK;
  }

 private:
  const size_t bytes_;
};

class ScriptedAgent {
 public:
  explicit ScriptedAgent(size_t status_bytes) : service_(status_bytes) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxSendMessageSize(64 << 20);  // an agent that sends anything
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedAgent() { server_->Shutdown(); }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  int port() const { return port_; }

 private:
  BigStatusAgent service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(GrpcAgentClient, ReadsAStatusLargerThanGrpcsDefaultLimit) {
  ScriptedAgent agent(6 << 20);  // over the 4 MiB default, under the channel's limit
  ASSERT_NE(agent.port(), 0);
  GrpcAgentClient client("local/200", agent.target());
  absl::StatusOr<fleet::v1::StatusResponse> status = client.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_GT(status->ByteSizeLong(), 6u << 20);
}

TEST(GrpcAgentClient, RefusesAStatusOverItsDeliberateLimitNamingTheContainer) {
  ScriptedAgent agent(kAgentRpcMaxMessageBytes + (1 << 20));
  ASSERT_NE(agent.port(), 0);
  GrpcAgentClient client("local/200", agent.target());
  absl::StatusOr<fleet::v1::StatusResponse> status = client.Status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.status().message().find("container local/200"), absl::string_view::npos)
      << status.status();
}

}  // namespace
}  // namespace fleet::daemon

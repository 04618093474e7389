// RemoteAgentClient: the AgentClient of a container on a host reached over SSH. Before the first
// call reaches the agent, and again after its stream was lost, it makes sure (on a thread of its
// own) that the container runs fleetd's agent and that it answers (EnsureAgent: version, push,
// start, health), then talks to it with a GrpcAgentClient over the container's channel: `direct`
// (the container's address, mutual TLS) or `ssh_tunnel` (an SshTunnel through the host, mutual
// TLS inside it).
//
// Until the agent answers, every call and the stream fail at once with Unavailable and the
// reason ("host pve1, container 201: agent bootstrap, step push: ..."), which the daemon logs and
// shows as its servers' reason ("agent unreachable: ...") while it retries with its backoff.
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/agent_client.h"
#include "daemon/remote/agent_bootstrap.h"
#include "daemon/ssh/ssh_session.h"
#include "daemon/ssh/ssh_tunnel.h"
#include "proto/config.pb.h"

namespace fleet::daemon {

struct RemoteAgentOptions {
  std::string container;  // "host/ctid", as events are reported
  std::string ctid;
  SshOptions ssh;
  fleet::v1::Channel channel;  // DIRECT or SSH_TUNNEL, with its TLS files
  AgentPackage package;
  absl::Duration health_timeout = absl::Seconds(30);
};

class RemoteAgentClient : public AgentClient {
 public:
  explicit RemoteAgentClient(RemoteAgentOptions options);
  ~RemoteAgentClient() override;

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override;
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override;
  void LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) override;
  void StopAsync(const fleet::v1::StopRequest& r, StopDone done) override;
  void StatusAsync(StatusDone done) override;
  absl::StatusOr<fleet::v1::StatusResponse> Status() override;
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) override;
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override;
  absl::Status Logs(const fleet::v1::LogsRequest& r,
                    const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                    CallCancel* cancel) override;
  void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) override;
  void CancelFollow() override;

  // The last bootstrap's result (tests, the benchmark): empty steps before the first one ended.
  BootstrapResult last_bootstrap() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class StreamWatch;
  // The client to use now, or Unavailable with why not (and a bootstrap started if none runs).
  // With `wait` (the blocking calls: fleetd's worker threads and the CLI's calls), waits for the
  // bootstrap that runs to end first; without (the asynchronous calls and the stream, made from
  // the daemon's loop), answers at once.
  absl::StatusOr<std::shared_ptr<AgentClient>> Ready(bool wait) ABSL_LOCKS_EXCLUDED(mu_);
  // `then` with the client, or with why there is none, once a bootstrap that runs has ended (at
  // once when there is a client; from the bootstrap's thread otherwise): the asynchronous calls
  // wait for the agent without holding a thread.
  using ReadyDone = std::function<void(absl::StatusOr<std::shared_ptr<AgentClient>>)>;
  void WhenReady(ReadyDone then) ABSL_LOCKS_EXCLUDED(mu_);
  void StartBootstrapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Bootstrap();  // on thread_
  absl::Status BootstrapOnce();

  const RemoteAgentOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<AgentClient> client_ ABSL_GUARDED_BY(mu_);  // set once the agent answered
  absl::Status status_ ABSL_GUARDED_BY(mu_);                  // why there is no client
  bool running_ ABSL_GUARDED_BY(mu_) = false;                 // a bootstrap runs
  absl::CondVar ended_;                                       // running_ turned false
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  BootstrapResult last_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StreamWatch> watch_ ABSL_GUARDED_BY(mu_);
  std::vector<ReadyDone> waiting_ ABSL_GUARDED_BY(mu_);  // WhenReady callers
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  // Only the bootstrap thread touches these while running_.
  std::unique_ptr<SshSession> ssh_;
  std::unique_ptr<SshTunnel> tunnel_;
  std::shared_ptr<GrpcAgentClient> grpc_;
  // A bootstrap may have left its staging directory on the host: at first (a fleetd before this
  // one may have died mid-bootstrap), and after one that failed or could not remove it.
  bool stage_may_be_left_ = true;
};

}  // namespace fleet::daemon

#include "daemon/remote/remote_agent_client.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"

namespace fleet::daemon {

// Passes a stream's events on, and notes how it ended: a stream lost to Unavailable (the agent
// or the way to it gone) makes the next call check the agent again (and start it if need be).
class RemoteAgentClient::StreamWatch : public EventSink {
 public:
  StreamWatch(RemoteAgentClient* owner, EventSink* sink) : owner_(owner), sink_(sink) {}
  void OnEvent(const std::string& container, fleet::v1::AgentEvent event) override {
    sink_->OnEvent(container, std::move(event));
  }
  void OnEvents(const std::string& container, std::vector<fleet::v1::AgentEvent> events) override {
    sink_->OnEvents(container, std::move(events));
  }
  bool Admit(std::function<void()> resume) override { return sink_->Admit(std::move(resume)); }
  void OnStreamEnded(const std::string& container, absl::Status status) override {
    if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
      absl::MutexLock lock(&owner_->mu_);
      owner_->client_.reset();
      owner_->status_ = absl::UnavailableError(absl::StrCat(
          "host ", owner_->options_.ssh.host_name, ", container ", owner_->options_.ctid,
          ": agent lost (", status.message(), "); checking it again"));
    }
    sink_->OnStreamEnded(container, std::move(status));
  }

 private:
  RemoteAgentClient* const owner_;
  EventSink* const sink_;
};

RemoteAgentClient::RemoteAgentClient(RemoteAgentOptions options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  status_ = absl::UnavailableError(absl::StrCat("host ", options_.ssh.host_name, ", container ",
                                                options_.ctid, ": agent bootstrap not started"));
}

RemoteAgentClient::~RemoteAgentClient() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    thread.swap(thread_);
  }
  if (thread.joinable()) thread.join();
  absl::MutexLock lock(&mu_);
  client_.reset();
}

BootstrapResult RemoteAgentClient::last_bootstrap() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

void RemoteAgentClient::StartBootstrapLocked() {
  if (running_ || stopping_) return;
  if (thread_.joinable()) thread_.join();  // the last bootstrap, finished
  running_ = true;
  thread_ = std::thread([this] { Bootstrap(); });
}

absl::StatusOr<std::shared_ptr<AgentClient>> RemoteAgentClient::Ready(bool wait) {
  absl::MutexLock lock(&mu_);
  if (client_ != nullptr) return client_;
  StartBootstrapLocked();
  while (wait && running_) ended_.Wait(&mu_);
  if (client_ != nullptr) return client_;
  return status_;
}

void RemoteAgentClient::WhenReady(ReadyDone then) {
  absl::StatusOr<std::shared_ptr<AgentClient>> now;
  {
    absl::MutexLock lock(&mu_);
    if (client_ != nullptr) {
      now = client_;
    } else if (stopping_) {
      now = status_;
    } else {
      StartBootstrapLocked();
      waiting_.push_back(std::move(then));
      return;
    }
  }
  then(std::move(now));
}

void RemoteAgentClient::Bootstrap() {
  absl::Status s = BootstrapOnce();
  std::vector<ReadyDone> waiting;
  absl::StatusOr<std::shared_ptr<AgentClient>> result;
  {
    absl::MutexLock lock(&mu_);
    running_ = false;
    ended_.SignalAll();
    if (s.ok()) {
      client_ = grpc_;
      status_ = absl::OkStatus();
      result = client_;
    } else {
      status_ = std::move(s);
      result = status_;
    }
    waiting.swap(waiting_);
  }
  for (ReadyDone& then : waiting) then(result);
}

absl::Status RemoteAgentClient::BootstrapOnce() {
  const fleet::v1::Channel& ch = options_.channel;
  const int port = ch.port() > 0 ? ch.port() : 50151;
  const std::string prefix =
      absl::StrCat("host ", options_.ssh.host_name, ", container ", options_.ctid, ": ");
  if (ssh_ == nullptr || !ssh_->connected()) {
    ssh_.reset();
    auto ssh = SshSession::Connect(options_.ssh);
    if (!ssh.ok()) return absl::UnavailableError(absl::StrCat(prefix, ssh.status().message()));
    ssh_ = *std::move(ssh);
  }
  // The agent listens on the container's address (direct), or where the host reaches it
  // (ssh_tunnel: the container's address on the host's bridge, or loopback for a container that
  // shares the host's network).
  const std::string address = ch.address().empty() ? "127.0.0.1" : ch.address();
  const std::string bracketed =
      absl::StrContains(address, ':') ? absl::StrCat("[", address, "]") : address;
  std::string target = absl::StrCat(bracketed, ":", port);
  if (ch.kind() == fleet::v1::Channel::SSH_TUNNEL) {
    if (tunnel_ == nullptr || tunnel_->broken()) {
      grpc_.reset();
      tunnel_.reset();
      auto tunnel = SshTunnel::Open(options_.ssh, address, port);
      if (!tunnel.ok()) {
        return absl::UnavailableError(
            absl::StrCat(prefix, "ssh tunnel: ", tunnel.status().message()));
      }
      tunnel_ = *std::move(tunnel);
    }
    target = tunnel_->target();
  }
  if (grpc_ == nullptr) {
    // The tunnel's end is 127.0.0.1: the name checked is the container's own (AgentTlsName).
    absl::StatusOr<AgentTls> tls = ReadChannelTls(options_.container, ch);
    if (!tls.ok()) return tls.status();
    grpc_ = std::make_shared<GrpcAgentClient>(options_.container, target, *tls);
  }
  BootstrapSpec spec;
  spec.host = options_.ssh.host_name;
  spec.ctid = options_.ctid;
  spec.listen = absl::StrCat(bracketed, ":", port);
  spec.ca_file = ch.ca_file();
  spec.agent_cert_file = ch.agent_cert_file();
  spec.agent_key_file = ch.agent_key_file();
  spec.health_timeout = options_.health_timeout;
  spec.remove_stale_stage = stage_may_be_left_;
  GrpcAgentClient* grpc = grpc_.get();
  absl::StatusOr<BootstrapResult> r = EnsureAgent(
      *ssh_, options_.package, spec, [grpc](absl::Duration wait) { return grpc->Answers(wait); });
  // A failed bootstrap may have left its staging directory (its clean-up needs the connection
  // it lost): the next one removes it, even if it finds the agent up to date.
  stage_may_be_left_ = !r.ok() || r->stage_left;
  if (!r.ok()) return r.status();
  if (r->started) {
    // What an operator wants in fleetd's log: which agent now runs there, and what it took.
    absl::Duration total;
    std::string steps;
    for (size_t i = 0; i < r->steps.size() && i < r->step_times.size(); ++i) {
      total += r->step_times[i];
      absl::StrAppend(&steps, i == 0 ? "" : ", ", r->steps[i], " ",
                      absl::FormatDuration(absl::Trunc(r->step_times[i], absl::Milliseconds(1))));
    }
    log::Get(log::Component::kLinks)
        .info("{} {}{} {} ({}) in {}: {}", log::LogFields{.container = options_.container}, prefix,
              options_.package.version, r->pushed ? "installed and started" : "started",
              r->previous_version.empty() ? "none before" : "was " + r->previous_version,
              absl::FormatDuration(absl::Trunc(total, absl::Milliseconds(1))), steps);
  }
  absl::MutexLock lock(&mu_);
  last_ = *std::move(r);
  return absl::OkStatus();
}

absl::StatusOr<fleet::v1::LaunchResponse> RemoteAgentClient::Launch(
    const fleet::v1::LaunchRequest& r) {
  auto c = Ready(true);
  if (!c.ok()) return c.status();
  return (*c)->Launch(r);
}

absl::StatusOr<fleet::v1::StopResponse> RemoteAgentClient::Stop(const fleet::v1::StopRequest& r) {
  auto c = Ready(true);
  if (!c.ok()) return c.status();
  return (*c)->Stop(r);
}

void RemoteAgentClient::LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) {
  WhenReady([r, done = std::move(done)](absl::StatusOr<std::shared_ptr<AgentClient>> c) mutable {
    if (!c.ok()) return done(c.status());
    (*c)->LaunchAsync(r, std::move(done));
  });
}

void RemoteAgentClient::StopAsync(const fleet::v1::StopRequest& r, StopDone done) {
  WhenReady([r, done = std::move(done)](absl::StatusOr<std::shared_ptr<AgentClient>> c) mutable {
    if (!c.ok()) return done(c.status());
    (*c)->StopAsync(r, std::move(done));
  });
}

void RemoteAgentClient::StatusAsync(StatusDone done) {
  WhenReady([done = std::move(done)](absl::StatusOr<std::shared_ptr<AgentClient>> c) mutable {
    if (!c.ok()) return done(c.status());
    (*c)->StatusAsync(std::move(done));
  });
}

absl::StatusOr<fleet::v1::StatusResponse> RemoteAgentClient::Status() {
  auto c = Ready(true);
  if (!c.ok()) return c.status();
  return (*c)->Status();
}

absl::StatusOr<fleet::v1::ToolchainSnapshot> RemoteAgentClient::Probe(
    const fleet::v1::ServerSpec& s) {
  auto c = Ready(true);
  if (!c.ok()) return c.status();
  return (*c)->Probe(s);
}

absl::StatusOr<fleet::v1::ApplyResponse> RemoteAgentClient::Apply(
    const fleet::v1::ApplyRequest& r) {
  auto c = Ready(true);
  if (!c.ok()) return c.status();
  return (*c)->Apply(r);
}

absl::Status RemoteAgentClient::Logs(
    const fleet::v1::LogsRequest& r,
    const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk, CallCancel* cancel) {
  auto c = Ready(true);
  if (!c.ok()) return c.status();
  return (*c)->Logs(r, on_chunk, cancel);
}

void RemoteAgentClient::Follow(const std::string& incarnation, uint64_t after, EventSink* sink) {
  auto c = Ready(false);
  if (!c.ok()) return sink->OnStreamEnded(options_.container, c.status());
  StreamWatch* watch;
  {
    absl::MutexLock lock(&mu_);
    watch_ = std::make_unique<StreamWatch>(this, sink);
    watch = watch_.get();
  }
  (*c)->Follow(incarnation, after, watch);
}

void RemoteAgentClient::CancelFollow() {
  std::shared_ptr<AgentClient> c;
  {
    absl::MutexLock lock(&mu_);
    c = client_;
  }
  if (c != nullptr) c->CancelFollow();
}

}  // namespace fleet::daemon

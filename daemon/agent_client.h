// AgentClient: the daemon's handle on one container's agent: the unary calls of agent.proto, each
// with a deadline, and the event stream followed from a cursor. Events are handed to an
// EventSink as they arrive, in order; when the stream ends (agent gone, network) the sink hears
// it once, and the daemon follows again, after a backoff, from its stored cursor.
//
// GrpcAgentClient is the real one (callback API: no thread per stream). Tests and the scale
// benchmark may provide others. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/agent.grpc.pb.h"
#include "proto/config.pb.h"

namespace fleet::daemon {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnEvent(const std::string& container, fleet::v1::AgentEvent event) = 0;
  // Several events of one message, in order (EventBatches).
  virtual void OnEvents(const std::string& container, std::vector<fleet::v1::AgentEvent> events) {
    for (fleet::v1::AgentEvent& e : events) OnEvent(container, std::move(e));
  }
  // The stream ended (after every event it carried); `status` says why.
  virtual void OnStreamEnded(const std::string& container, absl::Status status) = 0;
  // Asked by a stream after each event: true to read the next one now. False when the sink
  // holds as many events as it will: it calls `resume` (once, from another thread) when it has
  // room, and the stream reads nothing until then. The agent keeps its events meanwhile, and gRPC's
  // flow control holds the rest at its end: the daemon's memory does not grow with a backlog.
  virtual bool Admit(std::function<void()> resume) { return true; }
};

// Ends a blocking call (Logs) from another thread: the call says how it is ended (Watch), and
// Cancel does that, at once, or when the call starts if the cancel came first. fleetd's Logs
// handler cancels when its client goes away (a `fleetctl logs -f` interrupted on a quiet server:
// no chunk comes that would let the call notice) and when fleetd stops. Thread-safe.
class CallCancel {
 public:
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);
  // `end` runs on Cancel (here, when cancelled already), under this object's lock: Unwatch,
  // called when the call is over and before what `end` touches goes, waits for it.
  void Watch(std::function<void()> end) ABSL_LOCKS_EXCLUDED(mu_);
  void Unwatch() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> end_ ABSL_GUARDED_BY(mu_);
};

class AgentClient {
 public:
  virtual ~AgentClient() = default;
  virtual absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) = 0;
  virtual absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) = 0;
  // Launch, Stop and Status without waiting: `done` runs once with the result, on another thread
  // or before this returns. The daemon sends a turn's calls this way (a bounded number at a
  // time), so that a fleet of thousands of servers is not launched, or connected, one round trip
  // after another while nothing is ingested. These defaults call the blocking methods (fakes in
  // tests).
  using LaunchDone = std::function<void(absl::StatusOr<fleet::v1::LaunchResponse>)>;
  using StopDone = std::function<void(absl::StatusOr<fleet::v1::StopResponse>)>;
  virtual void LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) { done(Launch(r)); }
  virtual void StopAsync(const fleet::v1::StopRequest& r, StopDone done) { done(Stop(r)); }
  using StatusDone = std::function<void(absl::StatusOr<fleet::v1::StatusResponse>)>;
  virtual void StatusAsync(StatusDone done) { done(Status()); }
  virtual absl::StatusOr<fleet::v1::StatusResponse> Status() = 0;
  virtual absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) = 0;
  virtual absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) = 0;
  // Streams a server's log: `on_chunk` for each piece until the agent ends it, `on_chunk`
  // returns false or `cancel` (may be null) is cancelled. Blocks.
  virtual absl::Status Logs(const fleet::v1::LogsRequest& r,
                            const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                            CallCancel* cancel) = 0;
  // Starts following the event stream after (incarnation, sequence). One stream at a time: a
  // Follow while the stream is live does nothing; once the sink has been told that it ended
  // (from OnStreamEnded on), a Follow starts the next.
  virtual void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) = 0;
  // Cancels the stream (OnStreamEnded follows).
  virtual void CancelFollow() = 0;
};

// Mutual TLS to an agent (channel `direct` with ca_file, cert_file, key_file): PEM text.
struct AgentTls {
  std::string ca_pem;    // the fleet CA: the agent's certificate must be signed by it
  std::string cert_pem;  // fleetd's client certificate
  std::string key_pem;   // and its key
  // The name the agent's certificate must carry, when not the target's host; empty: the host.
  std::string target_name_override;
};

// Reads the three PEM files (at client creation: a renewed certificate is read by the next
// client). A missing, unreadable or empty file is an error naming the container and the file.
absl::StatusOr<AgentTls> ReadAgentTls(const std::string& container, const std::string& ca_file,
                                      const std::string& cert_file, const std::string& key_file);

// The name a channel's agent certificate must carry: its tls_name, else its address (brackets of
// an IPv6 literal removed). fleetd sets it as the TLS target of every channel, so that an agent
// certificate of container A presented by container B (a loopback port, an ssh tunnel's
// 127.0.0.1, a moved address) is refused.
std::string AgentTlsName(const fleet::v1::Channel& channel);

// ReadAgentTls of the channel's files, with AgentTlsName as the target name.
absl::StatusOr<AgentTls> ReadChannelTls(const std::string& container,
                                        const fleet::v1::Channel& channel);

class GrpcAgentClient : public AgentClient {
 public:
  // `target` is a gRPC target: "unix:/path/agent.sock" or "127.0.0.1:50151". `container` is the
  // "host/ctid" the events are reported under. Without `tls`: a plaintext channel (loopback).
  GrpcAgentClient(std::string container, const std::string& target);
  // Mutual TLS: fleetd presents its certificate, and the agent's must be signed by the CA and
  // carry the target's host (or `tls.target_name_override`).
  GrpcAgentClient(std::string container, const std::string& target, const AgentTls& tls);
  ~GrpcAgentClient() override;

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& r) override;
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& r) override;
  // gRPC's callback API: no thread waits. The destructor cancels the calls still in flight and
  // waits for their `done`.
  void LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) override;
  void StopAsync(const fleet::v1::StopRequest& r, StopDone done) override;
  void StatusAsync(StatusDone done) override;
  absl::StatusOr<fleet::v1::StatusResponse> Status() override;
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec& s) override;
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest& r) override;
  absl::Status Logs(const fleet::v1::LogsRequest& r,
                    const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                    CallCancel* cancel) override;
  // OK when the agent answers a Status call once its channel connected within `wait` (this
  // thread driving the connection attempts meanwhile: grpc::Channel::WaitForConnected): a
  // bootstrap's health check. A call that fails fast finds the channel in TRANSIENT_FAILURE after
  // an agent not yet listening refused the first connection; the agent started by systemd in a
  // container was then never reached (the client sent its TLS hello only every 5 s, gRPC's backup
  // poller's interval, and the handshakes timed out). Unconnected, the error is the channel's own
  // (refused, handshake failed) or its state. A zero `wait`: Status(), failing fast.
  absl::Status Answers(absl::Duration wait);
  void Follow(const std::string& incarnation, uint64_t after, EventSink* sink) override;
  void CancelFollow() override;

 private:
  class Stream;
  template <typename Message>
  class Reader;
  struct PendingCall {
    virtual ~PendingCall() = default;
    grpc::ClientContext context;
  };
  template <typename Request, typename Response>
  struct UnaryCall;
  // Starts `call` (a stub_->async() method) with a context, request and response that live until
  // it completes; then `done`.
  template <typename Request, typename Response, typename Start>
  void CallAsync(const char* name, const Request& request,
                 std::function<void(absl::StatusOr<Response>)> done, Start start);

  GrpcAgentClient(std::string container, const std::string& target,
                  const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                  grpc::ChannelArguments args);

  const std::string container_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fleet::v1::Agent::Stub> stub_;
  absl::Mutex mu_;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // owned by itself; deletes itself when done
  // The agent answered EventBatches UNIMPLEMENTED (an older agent): its streams are Events.
  bool events_only_ ABSL_GUARDED_BY(mu_) = false;
  // Callbacks past their bookkeeping, still freeing a call or the stream: the destructor waits
  // for them too (the channel must outlive them).
  int finishing_ ABSL_GUARDED_BY(mu_) = 0;
  // Async calls in flight (shared: the destructor cancels them outside the lock).
  std::map<PendingCall*, std::shared_ptr<PendingCall>> calls_ ABSL_GUARDED_BY(mu_);
  absl::CondVar calls_done_;  // a call, the stream or a finishing callback ended
};

// A client that cannot talk to its agent (its TLS files could not be read, say): every call, and
// the stream, fail with `status`. The daemon shows it as the link's error and tries again later.
class UnavailableAgentClient : public AgentClient {
 public:
  explicit UnavailableAgentClient(std::string container, absl::Status status)
      : container_(std::move(container)), status_(std::move(status)) {}
  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest&) override {
    return status_;
  }
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest&) override {
    return status_;
  }
  absl::StatusOr<fleet::v1::StatusResponse> Status() override { return status_; }
  absl::StatusOr<fleet::v1::ToolchainSnapshot> Probe(const fleet::v1::ServerSpec&) override {
    return status_;
  }
  absl::StatusOr<fleet::v1::ApplyResponse> Apply(const fleet::v1::ApplyRequest&) override {
    return status_;
  }
  absl::Status Logs(const fleet::v1::LogsRequest&,
                    const std::function<bool(const fleet::v1::LogChunk&)>&, CallCancel*) override {
    return status_;
  }
  void Follow(const std::string&, uint64_t, EventSink* sink) override {
    sink->OnStreamEnded(container_, status_);
  }
  void CancelFollow() override {}

 private:
  const std::string container_;
  const absl::Status status_;
};

// A gRPC status as an absl::Status naming the container and the call.
absl::Status FromGrpc(const grpc::Status& s, const std::string& container, const char* call);

// Makes the client of one container's agent ("host/ctid"), from its config.
using AgentClientFactory = std::function<std::unique_ptr<AgentClient>(
    const std::string& container, const fleet::v1::Host& host, const fleet::v1::Container& config)>;

}  // namespace fleet::daemon

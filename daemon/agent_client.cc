#include "daemon/agent_client.h"

#include <fstream>
#include <iterator>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/base/rpc_limits.h"
#include "common/net/grpc_status.h"

namespace fleet::daemon {
namespace {

constexpr absl::Duration kCallDeadline = absl::Seconds(15);
// Probing runs tools; applying installs packages: minutes.
constexpr absl::Duration kToolDeadline = absl::Minutes(30);

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

}  // namespace

void CallCancel::Cancel() {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return;
  cancelled_ = true;
  if (end_) end_();
}

bool CallCancel::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void CallCancel::Watch(std::function<void()> end) {
  absl::MutexLock lock(&mu_);
  end_ = std::move(end);
  if (cancelled_ && end_) end_();
}

void CallCancel::Unwatch() {
  absl::MutexLock lock(&mu_);
  end_ = nullptr;
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& container, const char* call) {
  return FromGrpcStatus(s, absl::StrCat("container ", container, ": agent ", call));
}

const char* ChannelStateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "UNKNOWN";
}

// One followed event stream: EventBatches, or Events from an agent that has no EventBatches (it
// answers UNIMPLEMENTED before any event: followed again at once with Events, unseen by the
// sink, and the client remembers). Deletes itself in OnDone, after telling the sink.
class GrpcAgentClient::Stream {
 public:
  virtual ~Stream() = default;
  // Started outside the owner's lock: gRPC may run a callback on this thread.
  virtual void Start() = 0;
  virtual void Cancel() = 0;
};

template <typename Message>
class GrpcAgentClient::Reader : public GrpcAgentClient::Stream,
                                public grpc::ClientReadReactor<Message> {
 public:
  static constexpr bool kBatches = std::is_same_v<Message, fleet::v1::EventBatch>;

  Reader(GrpcAgentClient* owner, EventSink* sink, fleet::v1::EventsRequest request)
      : owner_(owner), sink_(sink), request_(std::move(request)) {}

  void Start() override {
    if constexpr (kBatches) {
      owner_->stub_->async()->EventBatches(&context_, &request_, this);
    } else {
      owner_->stub_->async()->Events(&context_, &request_, this);
    }
    this->StartRead(&message_);
    this->StartCall();
  }

  void Cancel() override { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    read_any_ = true;
    if constexpr (kBatches) {
      std::vector<fleet::v1::AgentEvent> events(
          std::make_move_iterator(message_.mutable_events()->begin()),
          std::make_move_iterator(message_.mutable_events()->end()));
      sink_->OnEvents(owner_->container_, std::move(events));
    } else {
      sink_->OnEvent(owner_->container_, std::move(message_));
    }
    message_.Clear();
    // A hold keeps the stream (no OnDone) while the sink has it waiting: the read that resumes it
    // starts outside the reactions.
    this->AddHold();
    if (sink_->Admit([this] {
          this->StartRead(&message_);
          this->RemoveHold();
        })) {
      this->RemoveHold();
      this->StartRead(&message_);
    }
  }

  void OnDone(const grpc::Status& status) override {
    GrpcAgentClient* const owner = owner_;
    const bool older_agent =
        kBatches && status.error_code() == grpc::StatusCode::UNIMPLEMENTED && !read_any_;
    Reader<fleet::v1::AgentEvent>* next = nullptr;
    // No longer the client's stream before the sink hears that it ended: the daemon follows
    // again as soon as it has heard (on another thread, maybe before this one goes on), and that
    // Follow must start a new stream, not find this one and do nothing (a link then followed no
    // stream at all, and its events stopped coming with no error: finding 15).
    {
      absl::MutexLock lock(&owner->mu_);
      if (older_agent) owner->events_only_ = true;
      if (owner->stream_ == this) {
        owner->stream_ = nullptr;
        if (older_agent)
          owner->stream_ = next = new Reader<fleet::v1::AgentEvent>(owner, sink_, request_);
      }
      ++owner->finishing_;
    }
    if (next != nullptr) {
      next->Start();
    } else {
      const grpc::Status ended =
          status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent ended the stream")
                      : status;
      sink_->OnStreamEnded(owner->container_, FromGrpc(ended, owner->container_, "Events"));
    }
    // Deleted (its context, which holds a reference to the channel, with it) before the owner
    // may let its channel go: the last reference to a gRPC channel must never drop on one of
    // gRPC's callback threads (the channel's release shuts down the callback queue whose thread
    // this is: an abort in gRPC's ref counting at fleetd's exit).
    delete this;
    absl::MutexLock lock(&owner->mu_);
    --owner->finishing_;
    owner->calls_done_.SignalAll();
  }

 private:
  GrpcAgentClient* const owner_;
  EventSink* const sink_;
  fleet::v1::EventsRequest request_;
  grpc::ClientContext context_;
  Message message_;
  bool read_any_ = false;  // gRPC's reactions of one stream never run at once
};

absl::StatusOr<AgentTls> ReadAgentTls(const std::string& container, const std::string& ca_file,
                                      const std::string& cert_file, const std::string& key_file) {
  AgentTls tls;
  const std::pair<const char*, const std::string*> files[] = {
      {"ca_file", &ca_file}, {"cert_file", &cert_file}, {"key_file", &key_file}};
  std::string* const pems[] = {&tls.ca_pem, &tls.cert_pem, &tls.key_pem};
  for (size_t i = 0; i < 3; ++i) {
    const auto& [field, path] = files[i];
    std::ifstream f(*path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (path->empty() || !f.is_open() || f.bad() || text.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("container ", container, ": channel ", field, " '", *path,
                       "' cannot be read (no such file, no access, or empty)"));
    }
    *pems[i] = std::move(text);
  }
  return tls;
}

std::string AgentTlsName(const fleet::v1::Channel& channel) {
  if (!channel.tls_name().empty()) return channel.tls_name();
  std::string name = channel.address();
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  return name;
}

absl::StatusOr<AgentTls> ReadChannelTls(const std::string& container,
                                        const fleet::v1::Channel& channel) {
  absl::StatusOr<AgentTls> tls =
      ReadAgentTls(container, channel.ca_file(), channel.cert_file(), channel.key_file());
  if (!tls.ok()) return tls;
  tls->target_name_override = AgentTlsName(channel);
  if (tls->target_name_override.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("container ", container,
                     ": channel: a TLS channel needs the name of the agent's "
                     "certificate (tls_name or address)"));
  }
  return tls;
}

namespace {

grpc::ChannelArguments BaseArguments() {
  grpc::ChannelArguments args;
  // Reconnect quickly after an agent restart; the daemon's own backoff paces the streams.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  // Deliberate limits, the agent's own (a Status of many failed servers is bounded there).
  args.SetMaxReceiveMessageSize(kAgentRpcMaxMessageBytes);
  args.SetMaxSendMessageSize(kAgentRpcMaxMessageBytes);
  return args;
}

grpc::ChannelArguments TlsArguments(const AgentTls& tls) {
  grpc::ChannelArguments args = BaseArguments();
  if (!tls.target_name_override.empty()) args.SetSslTargetNameOverride(tls.target_name_override);
  return args;
}

std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const AgentTls& tls) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;
  ssl.pem_cert_chain = tls.cert_pem;
  ssl.pem_private_key = tls.key_pem;
  return grpc::SslCredentials(ssl);
}

}  // namespace

GrpcAgentClient::GrpcAgentClient(std::string container, const std::string& target)
    : GrpcAgentClient(std::move(container), target, grpc::InsecureChannelCredentials(),
                      BaseArguments()) {}

GrpcAgentClient::GrpcAgentClient(std::string container, const std::string& target,
                                 const AgentTls& tls)
    : GrpcAgentClient(std::move(container), target, TlsCredentials(tls), TlsArguments(tls)) {}

GrpcAgentClient::GrpcAgentClient(std::string container, const std::string& target,
                                 const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                 grpc::ChannelArguments args)
    : container_(std::move(container)) {
  channel_ = grpc::CreateCustomChannel(target, credentials, args);
  stub_ = fleet::v1::Agent::NewStub(channel_);
}

GrpcAgentClient::~GrpcAgentClient() {
  CancelFollow();
  // Cancelled without the lock: gRPC may run a call's completion (which takes it) right here.
  std::vector<std::shared_ptr<PendingCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [raw, call] : calls_) calls.push_back(call);
  }
  for (const auto& call : calls) call->context.TryCancel();
  calls.clear();
  absl::MutexLock lock(&mu_);
  while (!calls_.empty() || stream_ != nullptr || finishing_ > 0) calls_done_.Wait(&mu_);
}

// One asynchronous unary call: what gRPC needs alive until it completes.
template <typename Request, typename Response>
struct GrpcAgentClient::UnaryCall : PendingCall {
  Request request;
  Response response;
  std::function<void(absl::StatusOr<Response>)> done;
};

template <typename Request, typename Response, typename Start>
void GrpcAgentClient::CallAsync(const char* name, const Request& request,
                                std::function<void(absl::StatusOr<Response>)> done, Start start) {
  auto owned = std::make_shared<UnaryCall<Request, Response>>();
  auto* call = owned.get();
  call->request = request;
  call->done = std::move(done);
  call->context.set_deadline(Deadline(kCallDeadline));
  {
    absl::MutexLock lock(&mu_);
    calls_[call] = std::move(owned);
  }
  start(&call->context, &call->request, &call->response, [this, call, name](grpc::Status status) {
    if (status.ok()) {
      call->done(std::move(call->response));
    } else {
      call->done(FromGrpc(status, container_, name));
    }
    std::shared_ptr<PendingCall> last;
    {
      absl::MutexLock lock(&mu_);
      auto it = calls_.find(call);
      last = std::move(it->second);
      calls_.erase(it);
      ++finishing_;
    }
    // Freed without the lock, and before the destructor may let the channel go (Stream::OnDone
    // says why).
    last.reset();
    absl::MutexLock lock(&mu_);
    --finishing_;
    calls_done_.SignalAll();
  });
}

void GrpcAgentClient::LaunchAsync(const fleet::v1::LaunchRequest& r, LaunchDone done) {
  CallAsync<fleet::v1::LaunchRequest, fleet::v1::LaunchResponse>(
      "Launch", r, std::move(done), [this](auto* c, auto* q, auto* p, auto cb) {
        stub_->async()->Launch(c, q, p, std::move(cb));
      });
}

void GrpcAgentClient::StatusAsync(StatusDone done) {
  CallAsync<fleet::v1::StatusRequest, fleet::v1::StatusResponse>(
      "Status", fleet::v1::StatusRequest(), std::move(done),
      [this](auto* c, auto* q, auto* p, auto cb) {
        stub_->async()->Status(c, q, p, std::move(cb));
      });
}

void GrpcAgentClient::StopAsync(const fleet::v1::StopRequest& r, StopDone done) {
  CallAsync<fleet::v1::StopRequest, fleet::v1::StopResponse>(
      "Stop", r, std::move(done),
      [this](auto* c, auto* q, auto* p, auto cb) { stub_->async()->Stop(c, q, p, std::move(cb)); });
}

absl::StatusOr<fleet::v1::LaunchResponse> GrpcAgentClient::Launch(
    const fleet::v1::LaunchRequest& r) {
  grpc::ClientContext c;
  c.set_deadline(Deadline(kCallDeadline));
  fleet::v1::LaunchResponse out;
  absl::Status s = FromGrpc(stub_->Launch(&c, r, &out), container_, "Launch");
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<fleet::v1::StopResponse> GrpcAgentClient::Stop(const fleet::v1::StopRequest& r) {
  grpc::ClientContext c;
  c.set_deadline(Deadline(kCallDeadline));
  fleet::v1::StopResponse out;
  absl::Status s = FromGrpc(stub_->Stop(&c, r, &out), container_, "Stop");
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<fleet::v1::StatusResponse> GrpcAgentClient::Status() {
  grpc::ClientContext c;
  c.set_deadline(Deadline(kCallDeadline));
  fleet::v1::StatusResponse out;
  absl::Status s =
      FromGrpc(stub_->Status(&c, fleet::v1::StatusRequest(), &out), container_, "Status");
  if (!s.ok()) return s;
  return out;
}

absl::Status GrpcAgentClient::Answers(absl::Duration wait) {
  // Connected first, this thread driving the attempts (WaitForConnected polls here); then the
  // call, with the usual deadline: a slow answer is not a missing agent.
  if (wait > absl::ZeroDuration() && !channel_->WaitForConnected(Deadline(wait))) {
    // Why it never connected: a call that fails fast reports the channel's last error (refused,
    // handshake failed) when the channel has given up on its attempt.
    fleet::v1::StatusResponse out;
    grpc::ClientContext why;
    why.set_deadline(Deadline(absl::Milliseconds(200)));
    const grpc::Status reason = stub_->Status(&why, fleet::v1::StatusRequest(), &out);
    if (reason.ok()) return absl::OkStatus();
    if (reason.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return FromGrpc(reason, container_, "Status");
    }
    return absl::UnavailableError(absl::StrCat("container ", container_,
                                               ": agent Status: not connected within ",
                                               absl::FormatDuration(wait), " (channel ",
                                               ChannelStateName(channel_->GetState(false)), ")"));
  }
  return Status().status();
}

absl::StatusOr<fleet::v1::ToolchainSnapshot> GrpcAgentClient::Probe(
    const fleet::v1::ServerSpec& spec) {
  grpc::ClientContext c;
  c.set_deadline(Deadline(kToolDeadline));
  fleet::v1::ProbeRequest request;
  *request.mutable_spec() = spec;
  fleet::v1::ProbeResponse out;
  absl::Status s = FromGrpc(stub_->Probe(&c, request, &out), container_, "Probe");
  if (!s.ok()) return s;
  return out.snapshot();
}

absl::StatusOr<fleet::v1::ApplyResponse> GrpcAgentClient::Apply(const fleet::v1::ApplyRequest& r) {
  grpc::ClientContext c;
  c.set_deadline(Deadline(kToolDeadline));
  fleet::v1::ApplyResponse out;
  absl::Status s = FromGrpc(stub_->Apply(&c, r, &out), container_, "Apply");
  if (!s.ok()) return s;
  return out;
}

absl::Status GrpcAgentClient::Logs(const fleet::v1::LogsRequest& r,
                                   const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                                   CallCancel* cancel) {
  grpc::ClientContext c;
  if (!r.follow()) c.set_deadline(Deadline(kCallDeadline));
  // A cancel ends the stream even while no chunk comes (gRPC cancels a call not started yet
  // when it starts).
  if (cancel != nullptr) cancel->Watch([&c] { c.TryCancel(); });
  auto reader = stub_->Logs(&c, r);
  fleet::v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    if (!on_chunk(chunk)) {
      c.TryCancel();
      break;
    }
  }
  const grpc::Status s = reader->Finish();
  if (cancel != nullptr) cancel->Unwatch();
  if (s.error_code() == grpc::StatusCode::CANCELLED) return absl::OkStatus();
  return FromGrpc(s, container_, "Logs");
}

void GrpcAgentClient::Follow(const std::string& incarnation, uint64_t after, EventSink* sink) {
  fleet::v1::EventsRequest request;
  request.set_incarnation(incarnation);
  request.set_after_sequence(after);
  Stream* stream = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (stream_ != nullptr) return;
    if (events_only_) {
      stream = new Reader<fleet::v1::AgentEvent>(this, sink, std::move(request));
    } else {
      stream = new Reader<fleet::v1::EventBatch>(this, sink, std::move(request));
    }
    stream_ = stream;
  }
  stream->Start();
}

void GrpcAgentClient::CancelFollow() {
  absl::MutexLock lock(&mu_);
  if (stream_ != nullptr) stream_->Cancel();
}

}  // namespace fleet::daemon

#include "cli/fleet_client.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/net/tls_files.h"
#include "grpcpp/grpcpp.h"

namespace fleet::cli {
namespace {

// A status table of a large fleet (8000 rows) is a few MiB; gRPC's default limit is 4 MiB.
constexpr int kMaxReceiveBytes = 64 << 20;

// Cancels a stream's context when no message arrives within `limit` of the start or of the last
// Touch(). Disarm() ends the limit for good (a watch that has delivered its first table may then
// stay quiet for hours). Cancelling from this thread is what ClientContext::TryCancel is for.
class StreamWatchdog {
 public:
  StreamWatchdog(grpc::ClientContext* context, absl::Duration limit)
      : context_(context), limit_(limit), thread_([this] { Run(); }) {}
  ~StreamWatchdog() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  void Touch() {
    absl::MutexLock lock(&mu_);
    ++touches_;
  }
  void Disarm() {
    absl::MutexLock lock(&mu_);
    armed_ = false;
  }
  bool fired() {
    absl::MutexLock lock(&mu_);
    return fired_;
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!done_) {
      if (!armed_) {
        mu_.Await(absl::Condition(&done_));
        return;
      }
      const int64_t seen = touches_;
      const auto woken = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return done_ || !armed_ || touches_ != seen;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&woken), absl::Now() + limit_)) {
        fired_ = true;
        context_->TryCancel();
        return;
      }
    }
  }

  grpc::ClientContext* const context_;
  const absl::Duration limit_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool armed_ ABSL_GUARDED_BY(mu_) = true;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  int64_t touches_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: started once the members above exist
};

std::string HumanDuration(absl::Duration d) {
  if (d < absl::Seconds(1)) return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
  return absl::FormatDuration(d);
}

}  // namespace

FleetClient::FleetClient(const std::string& socket_path, absl::Duration timeout)
    : socket_path_(socket_path), timeout_(timeout) {
  Init();
}

FleetClient::FleetClient(const ServerOptions& servers, absl::Duration timeout)
    : servers_(servers), timeout_(timeout) {
  Init();
}

FleetClient::FleetClient(const CommandContext& ctx, absl::Duration timeout)
    : socket_path_(ctx.servers.addresses.empty() ? ctx.socket_path : std::string()),
      servers_(ctx.servers),
      timeout_(timeout) {
  Init();
}

void FleetClient::Init() {
  absl::MutexLock lock(&mu_);
  if (socket_path_.empty()) {
    for (const std::string& address : servers_.addresses) IndexOf(address);
    return;
  }
  IndexOf("unix:" + socket_path_);
  // The socket is the one address: nothing to choose (its calls behave as they always have).
  chosen_ = 0;
  if (absl::Status s = Open(0); !s.ok()) std::abort();  // plaintext: nothing can fail
}

std::string FleetClient::target() const {
  absl::MutexLock lock(&mu_);
  if (endpoints_.empty()) return "";
  return endpoints_[chosen_ >= 0 ? static_cast<size_t>(chosen_) : 0]->address;
}

size_t FleetClient::IndexOf(const std::string& address) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i]->address == address) return i;
  }
  endpoints_.push_back(std::make_unique<Endpoint>());
  endpoints_.back()->address = address;
  return endpoints_.size() - 1;
}

absl::Status FleetClient::Open(size_t i) {
  Endpoint& endpoint = *endpoints_[i];
  if (endpoint.channel != nullptr) return absl::OkStatus();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  if (!socket_path_.empty()) {
    endpoint.channel =
        grpc::CreateCustomChannel(endpoint.address, grpc::InsecureChannelCredentials(), args);
  } else {
    if (credentials_ == nullptr) {
      if (servers_.insecure) {
        credentials_ = grpc::InsecureChannelCredentials();
      } else {
        absl::StatusOr<net::TlsPem> pem = net::ReadTlsFiles(servers_.tls, "--tls-");
        if (!pem.ok()) return pem.status();
        grpc::SslCredentialsOptions ssl;
        ssl.pem_root_certs = pem->ca_pem;
        ssl.pem_private_key = pem->key_pem;
        ssl.pem_cert_chain = pem->cert_pem;
        credentials_ = grpc::SslCredentials(ssl);
      }
    }
    // fleetd's certificate must name the host part of the address dialled (gRPC checks it).
    endpoint.channel = grpc::CreateCustomChannel(endpoint.address, credentials_, args);
  }
  endpoint.stub = v1::Fleet::NewStub(endpoint.channel);
  return absl::OkStatus();
}

namespace {

// Waits until `channel` is connected or has failed to connect (refused, TLS refused), or
// `deadline` passes; its state then.
grpc_connectivity_state AwaitAnswer(grpc::Channel* channel, absl::Time deadline) {
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         state != GRPC_CHANNEL_SHUTDOWN) {
    if (!channel->WaitForStateChange(state, absl::ToChronoTime(deadline))) break;
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return state;
}

// Each address gets at most this long to answer before the next is tried.
constexpr absl::Duration kConnectBudget = absl::Seconds(5);
// "Not the leader" answers followed per call: a leader that moved during the call, not a loop.
constexpr int kMaxRedirects = 2;

// A "not the leader" answer's leader address, or empty.
std::string LeaderOf(const grpc::ClientContext& context, const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return "";
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find(kLeaderMetadataKey);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::Status FleetClient::Run(const char* method, const Attempt& attempt) {
  Endpoint* endpoint = nullptr;
  std::optional<Outcome> outcome;  // the call, when made already while choosing
  {
    // The address to use: the chosen one (the socket, or the one address, is chosen from the
    // start), or the first of the list that answers. mu_ is held while choosing, so concurrent
    // first calls agree; never during a call on a chosen address.
    absl::MutexLock lock(&mu_);
    if (chosen_ < 0 && endpoints_.size() == 1) chosen_ = 0;
    if (chosen_ >= 0) {
      if (absl::Status s = Open(static_cast<size_t>(chosen_)); !s.ok()) return s;
      endpoint = endpoints_[static_cast<size_t>(chosen_)].get();
    } else {
      std::vector<std::string> failures;
      const absl::Duration budget = std::min(timeout_, kConnectBudget);
      for (size_t i = 0; i < endpoints_.size() && endpoint == nullptr; ++i) {
        if (absl::Status s = Open(i); !s.ok()) return s;
        Endpoint& candidate = *endpoints_[i];
        const grpc_connectivity_state state =
            AwaitAnswer(candidate.channel.get(), absl::Now() + budget);
        if (state == GRPC_CHANNEL_READY) {
          chosen_ = static_cast<int>(i);
          endpoint = &candidate;
          break;
        }
        if (state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
          failures.push_back(
              absl::StrCat(candidate.address, ": no answer within ", HumanDuration(budget)));
          continue;
        }
        // Failed to connect (refused, the TLS handshake refused): the call itself says why. On
        // such a channel it fails at once, Unavailable, with gRPC's reason, and nothing is sent
        // (should the channel connect meanwhile, the call runs there and that address is used).
        Outcome tried = attempt(candidate);
        if (!tried.answered && tried.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
            candidate.channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
          failures.push_back(absl::StrCat(candidate.address, ": ", tried.status.error_message()));
          continue;
        }
        chosen_ = static_cast<int>(i);
        endpoint = &candidate;
        outcome = std::move(tried);
      }
      if (endpoint == nullptr) {
        return absl::UnavailableError(absl::StrCat("cannot reach fleetd at any of ",
                                                   endpoints_.size(),
                                                   " addresses: ", absl::StrJoin(failures, "; ")));
      }
    }
  }
  for (int redirects = 0;; ++redirects) {
    if (!outcome) outcome = attempt(*endpoint);
    // Over the socket there are no TLS settings to reach the leader with: its address is in the
    // standby's message (following it in plaintext would be a silent downgrade).
    if (outcome->leader.empty() || redirects == kMaxRedirects || !socket_path_.empty()) break;
    // "Not the leader": the request was refused, not run; the leader gets it.
    absl::MutexLock lock(&mu_);
    const size_t leader = IndexOf(outcome->leader);
    if (absl::Status s = Open(leader); !s.ok()) return s;
    chosen_ = static_cast<int>(leader);
    endpoint = endpoints_[leader].get();
    outcome.reset();
  }
  return Translate(*endpoint, outcome->status, method, outcome->timed_out);
}

absl::Status FleetClient::Translate(const Endpoint& endpoint, const grpc::Status& status,
                                    const char* method, bool timed_out) const {
  if (status.ok()) return absl::OkStatus();
  const std::string& target = endpoint.address;
  const std::string& message = status.error_message();
  if (timed_out || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat("fleetd at ", target, " did not answer within ", HumanDuration(timeout_)));
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      endpoint.channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    if (socket_path_.empty()) {
      // Over TCP gRPC's own reason is the best there is (connection refused, the TLS handshake
      // refused, a name that does not resolve).
      return absl::UnavailableError(absl::StrCat("cannot reach fleetd at ", target, ": ", message));
    }
    // gRPC's text ("failed to connect to all addresses; ...") does not say what to do; the most
    // common causes are told apart by looking at the socket.
    struct stat st;
    if (::stat(socket_path_.c_str(), &st) != 0) {
      const int err = errno;
      if (err == ENOENT) {
        return absl::UnavailableError(absl::StrCat(
            "cannot reach fleetd at ", target,
            ": no such socket (is fleetd running? --socket, --state-dir or FLEET_SOCKET name "
            "another)"));
      }
      return absl::UnavailableError(
          absl::StrCat("cannot reach fleetd at ", target, ": ", std::strerror(err)));
    }
    if (!S_ISSOCK(st.st_mode)) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach fleetd at ", target, ": not a socket"));
    }
    return absl::UnavailableError(absl::StrCat("cannot reach fleetd at ", target, ": ", message));
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && message.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("fleetd at ", target, " does not serve ", method, " (an older fleetd?)"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

template <typename Request, typename Response>
absl::Status FleetClient::CallInto(const char* method, StubMethod<Request, Response> fn,
                                   const Request& request, Response* response) {
  return Run(method, [&](Endpoint& endpoint) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(Deadline()));
    Outcome outcome;
    outcome.status = (endpoint.stub.get()->*fn)(&context, request, response);
    outcome.leader = LeaderOf(context, outcome.status);
    return outcome;
  });
}

template <typename Request, typename Response>
absl::StatusOr<Response> FleetClient::Call(const char* method, StubMethod<Request, Response> fn,
                                           const Request& request) {
  Response response;
  if (absl::Status s = CallInto(method, fn, request, &response); !s.ok()) return s;
  return response;
}

absl::StatusOr<v1::DeployResponse> FleetClient::Deploy(const v1::DeployRequest& request) {
  return Call("Deploy", &v1::Fleet::Stub::Deploy, request);
}

absl::StatusOr<v1::FleetStatusResponse> FleetClient::Status(const v1::FleetStatusRequest& request) {
  return Call("Status", &v1::Fleet::Stub::Status, request);
}

absl::Status FleetClient::Status(const v1::FleetStatusRequest& request,
                                 v1::FleetStatusResponse* response) {
  return CallInto("Status", &v1::Fleet::Stub::Status, request, response);
}

absl::StatusOr<v1::ListAttemptsResponse> FleetClient::ListAttempts(
    const v1::ListAttemptsRequest& request) {
  return Call("ListAttempts", &v1::Fleet::Stub::ListAttempts, request);
}

absl::StatusOr<v1::ExplainResponse> FleetClient::Explain(const v1::ExplainRequest& request) {
  return Call("Explain", &v1::Fleet::Stub::Explain, request);
}

absl::StatusOr<v1::ServersResponse> FleetClient::Restart(const v1::ServersRequest& request) {
  return Call("Restart", &v1::Fleet::Stub::Restart, request);
}

absl::StatusOr<v1::ServersResponse> FleetClient::Stop(const v1::ServersRequest& request) {
  return Call("Stop", &v1::Fleet::Stub::Stop, request);
}

absl::StatusOr<v1::PlanResponse> FleetClient::Plan(const v1::PlanRequest& request) {
  return Call("Plan", &v1::Fleet::Stub::Plan, request);
}

absl::StatusOr<v1::ApplyPlanResponse> FleetClient::ApplyPlan(const v1::ApplyPlanRequest& request) {
  return Call("ApplyPlan", &v1::Fleet::Stub::ApplyPlan, request);
}

absl::StatusOr<v1::ListRemediationsResponse> FleetClient::ListRemediations(
    const v1::ListRemediationsRequest& request) {
  return Call("ListRemediations", &v1::Fleet::Stub::ListRemediations, request);
}

absl::StatusOr<v1::TrustHostResponse> FleetClient::TrustHost(const v1::TrustHostRequest& request) {
  return Call("TrustHost", &v1::Fleet::Stub::TrustHost, request);
}

absl::StatusOr<v1::ListHostsResponse> FleetClient::ListHosts(const v1::ListHostsRequest& request) {
  return Call("ListHosts", &v1::Fleet::Stub::ListHosts, request);
}

namespace {

// A server stream read to its end, each message given to `on_message` (false stops it). The
// deadline: `timeout` for the first message, then none (`first_disarms`: Watch, whose first
// message is the table); or `timeout` between messages, none at all when following.
struct StreamEnd {
  grpc::Status status;
  bool timed_out = false;
  bool stopped_by_caller = false;  // on_message said stop: not an error
  bool answered = false;           // a message arrived
  std::string leader;              // a "not the leader" answer's leader address
};

template <typename Response, typename Open>
StreamEnd ReadStream(absl::Duration timeout, bool follow, bool first_disarms, Open open,
                     const std::function<bool(const Response&)>& on_message) {
  grpc::ClientContext context;
  bool stopped_by_caller = false;
  bool timed_out = false;
  bool answered = false;
  grpc::Status status;
  {
    StreamWatchdog watchdog(&context, timeout);
    if (follow) watchdog.Disarm();
    std::unique_ptr<grpc::ClientReader<Response>> reader = open(&context);
    Response message;
    while (reader->Read(&message)) {
      answered = true;
      if (first_disarms) {
        watchdog.Disarm();
      } else {
        watchdog.Touch();
      }
      if (!on_message(message)) {
        stopped_by_caller = true;
        context.TryCancel();
        break;
      }
    }
    status = reader->Finish();
    timed_out = watchdog.fired();
  }
  return {status, timed_out, stopped_by_caller, answered, LeaderOf(context, status)};
}

}  // namespace

absl::Status FleetClient::Watch(const v1::FleetStatusRequest& request,
                                const WatchCallback& on_message) {
  bool stopped_by_caller = false;
  const absl::Status status = Run("Watch", [&](Endpoint& endpoint) {
    const StreamEnd end = ReadStream<v1::FleetStatusResponse>(
        timeout_, /*follow=*/false, /*first_disarms=*/true,
        [&](grpc::ClientContext* c) { return endpoint.stub->Watch(c, request); }, on_message);
    stopped_by_caller = end.stopped_by_caller;
    return Outcome{end.status, end.timed_out, end.answered, end.leader};
  });
  return stopped_by_caller ? absl::OkStatus() : status;
}

absl::Status FleetClient::Logs(const v1::ServerLogsRequest& request,
                               const LogsCallback& on_message) {
  bool stopped_by_caller = false;
  const absl::Status status = Run("Logs", [&](Endpoint& endpoint) {
    const StreamEnd end = ReadStream<v1::LogChunk>(
        timeout_, request.follow(), /*first_disarms=*/false,
        [&](grpc::ClientContext* c) { return endpoint.stub->Logs(c, request); }, on_message);
    stopped_by_caller = end.stopped_by_caller;
    return Outcome{end.status, end.timed_out, end.answered, end.leader};
  });
  return stopped_by_caller ? absl::OkStatus() : status;
}

absl::Status FleetClient::FleetEvents(const v1::FleetEventsRequest& request,
                                      const EventsCallback& on_message) {
  bool stopped_by_caller = false;
  const absl::Status status = Run("FleetEvents", [&](Endpoint& endpoint) {
    const StreamEnd end = ReadStream<v1::FleetEventsResponse>(
        timeout_, request.follow(), /*first_disarms=*/false,
        [&](grpc::ClientContext* c) { return endpoint.stub->FleetEvents(c, request); }, on_message);
    stopped_by_caller = end.stopped_by_caller;
    return Outcome{end.status, end.timed_out, end.answered, end.leader};
  });
  return stopped_by_caller ? absl::OkStatus() : status;
}

}  // namespace fleet::cli

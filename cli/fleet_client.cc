#include "cli/fleet_client.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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
    : socket_path_(socket_path), target_("unix:" + socket_path), timeout_(timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  channel_ = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::Fleet::NewStub(channel_);
}

absl::Status FleetClient::Translate(const grpc::Status& status, const char* method,
                                    bool timed_out) const {
  if (status.ok()) return absl::OkStatus();
  const std::string& message = status.error_message();
  if (timed_out || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat("fleetd at ", target_, " did not answer within ", HumanDuration(timeout_)));
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    // gRPC's text ("failed to connect to all addresses; ...") does not say what to do; the most
    // common causes are told apart by looking at the socket.
    struct stat st;
    if (::stat(socket_path_.c_str(), &st) != 0) {
      const int err = errno;
      if (err == ENOENT) {
        return absl::UnavailableError(absl::StrCat(
            "cannot reach fleetd at ", target_,
            ": no such socket (is fleetd running? --socket, --state-dir or FLEET_SOCKET name "
            "another)"));
      }
      return absl::UnavailableError(
          absl::StrCat("cannot reach fleetd at ", target_, ": ", std::strerror(err)));
    }
    if (!S_ISSOCK(st.st_mode)) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach fleetd at ", target_, ": not a socket"));
    }
    return absl::UnavailableError(absl::StrCat("cannot reach fleetd at ", target_, ": ", message));
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && message.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("fleetd at ", target_, " does not serve ", method, " (an older fleetd?)"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

template <typename Request, typename Response>
absl::Status FleetClient::CallInto(const char* method, StubMethod<Request, Response> fn,
                                   const Request& request, Response* response) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(Deadline()));
  return Translate((stub_.get()->*fn)(&context, request, response), method, /*timed_out=*/false);
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
};

template <typename Response, typename Open>
StreamEnd ReadStream(absl::Duration timeout, bool follow, bool first_disarms, Open open,
                     const std::function<bool(const Response&)>& on_message) {
  grpc::ClientContext context;
  bool stopped_by_caller = false;
  bool timed_out = false;
  grpc::Status status;
  {
    StreamWatchdog watchdog(&context, timeout);
    if (follow) watchdog.Disarm();
    std::unique_ptr<grpc::ClientReader<Response>> reader = open(&context);
    Response message;
    while (reader->Read(&message)) {
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
  return {status, timed_out, stopped_by_caller};
}

}  // namespace

absl::Status FleetClient::Watch(const v1::FleetStatusRequest& request,
                                const WatchCallback& on_message) {
  const StreamEnd end = ReadStream<v1::FleetStatusResponse>(
      timeout_, /*follow=*/false, /*first_disarms=*/true,
      [&](grpc::ClientContext* c) { return stub_->Watch(c, request); }, on_message);
  if (end.stopped_by_caller) return absl::OkStatus();
  return Translate(end.status, "Watch", end.timed_out);
}

absl::Status FleetClient::Logs(const v1::ServerLogsRequest& request,
                               const LogsCallback& on_message) {
  const StreamEnd end = ReadStream<v1::LogChunk>(
      timeout_, request.follow(), /*first_disarms=*/false,
      [&](grpc::ClientContext* c) { return stub_->Logs(c, request); }, on_message);
  if (end.stopped_by_caller) return absl::OkStatus();
  return Translate(end.status, "Logs", end.timed_out);
}

absl::Status FleetClient::FleetEvents(const v1::FleetEventsRequest& request,
                                      const EventsCallback& on_message) {
  const StreamEnd end = ReadStream<v1::FleetEventsResponse>(
      timeout_, request.follow(), /*first_disarms=*/false,
      [&](grpc::ClientContext* c) { return stub_->FleetEvents(c, request); }, on_message);
  if (end.stopped_by_caller) return absl::OkStatus();
  return Translate(end.status, "FleetEvents", end.timed_out);
}

}  // namespace fleet::cli

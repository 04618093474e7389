#include "daemon/fleet_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/config/secret_redaction.h"
#include "common/net/grpc_status.h"
#include "common/net/subscriber_stream.h"
#include "daemon/ssh/ssh_reach.h"

namespace fleet::daemon {
namespace {

template <typename T>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* c, absl::StatusOr<T> result,
                                 T* response) {
  auto* reactor = c->DefaultReactor();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

// Plans leave fleetd with secret env values masked (the stored plan blob keeps them).
template <typename T>
absl::StatusOr<T> WithPlansRedacted(absl::StatusOr<T> result) {
  if (!result.ok()) return result;
  if constexpr (std::is_same_v<T, fleet::v1::ListRemediationsResponse>) {
    for (fleet::v1::Plan& plan : *result->mutable_plans()) config::RedactPlan(&plan);
  } else {
    config::RedactPlan(result->mutable_plan());
    if constexpr (std::is_same_v<T, fleet::v1::ApplyPlanResponse>) {
      // The results repeat the plan's actions.
      fleet::v1::Plan results;
      *results.mutable_results() = result->results();
      config::RedactPlan(&results);
      *result->mutable_results() = results.results();
    }
  }
  return result;
}

grpc::ServerUnaryReactor* Fail(grpc::CallbackServerContext* c, const absl::Status& status) {
  auto* reactor = c->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A stream refused before it began: finished at once with `status`.
template <typename T>
class RefusedStream final : public grpc::ServerWriteReactor<T> {
 public:
  explicit RefusedStream(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// The whole table first, then each change, until the client goes away.
class WatchStream : public net::SubscriberStream<fleet::v1::FleetStatusResponse>,
                    public StatusSubscriber {
 public:
  WatchStream(Daemon* daemon, const fleet::v1::FleetStatusRequest& request)
      : net::SubscriberStream<fleet::v1::FleetStatusResponse>("watch: write failed"),
        daemon_(daemon),
        servers_(request.servers().begin(), request.servers().end()) {
    daemon_->Subscribe(this);
    Start();
  }

  void OnStatusChanged() override { Wake(); }

 private:
  // The rows changed since the last message (the whole table first, even when empty).
  bool Fill(fleet::v1::FleetStatusResponse* out) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<fleet::v1::ServerRow> rows = daemon_->ChangedRows(servers_, &since_);
    if (rows.empty() && sent_first_) return false;
    for (auto& r : rows) *out->add_servers() = std::move(r);
    *out->mutable_at() = google::protobuf::Timestamp();
    sent_first_ = true;
    return true;
  }

  void Detach() override { daemon_->Unsubscribe(this); }

  Daemon* const daemon_;
  const std::set<std::string> servers_;
  uint64_t since_ ABSL_GUARDED_BY(mu_) = 0;
  bool sent_first_ ABSL_GUARDED_BY(mu_) = false;
};

// `fleetctl events`: the recorded events after the request's index, in pages, then (follow) each
// new one as the journal commits it. A position older than the oldest kept is answered `resync`
// once, and the stream goes on from the oldest kept. Without follow it ends when it has caught up.
class FleetEventsStream : public net::SubscriberStream<fleet::v1::FleetEventsResponse>,
                          public FleetEventListener {
 public:
  static constexpr size_t kPage = 512;

  FleetEventsStream(Daemon* daemon, const fleet::v1::FleetEventsRequest& request)
      : net::SubscriberStream<fleet::v1::FleetEventsResponse>("events: write failed"),
        daemon_(daemon),
        follow_(request.follow()),
        since_(std::max<int64_t>(0, request.since())) {
    daemon_->journal().AddListener(this);
    Start();
  }

  void OnFleetEvents(const std::vector<fleet::v1::FleetEvent>&) override { Wake(); }

 private:
  bool Fill(fleet::v1::FleetEventsResponse* out) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (done_) return false;
    int64_t oldest = 0;
    auto page = daemon_->FleetEvents(since_, kPage, &oldest);
    if (!page.ok()) {
      done_ = true;
      EndInFill(grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(page.status().message())));
      return false;
    }
    if (!checked_) {
      checked_ = true;
      // Events between `since` and the oldest kept were pruned (or `since` is from before a
      // record was reset): said once, then the stream goes on from what is kept.
      if (since_ > 0 && oldest > since_ + 1) {
        out->set_resync(true);
        out->set_oldest(oldest);
        since_ = oldest - 1;
        return true;
      }
    }
    if (page->empty()) {
      if (!follow_) {
        done_ = true;
        EndInFill(grpc::Status::OK);
      }
      return false;
    }
    since_ = page->back().index();
    for (auto& e : *page) *out->add_events() = std::move(e);
    return true;
  }

  void Detach() override { daemon_->journal().RemoveListener(this); }

  Daemon* const daemon_;
  const bool follow_;
  int64_t since_ ABSL_GUARDED_BY(mu_);
  bool checked_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// Relays the agent's log stream on a thread of its own (the agent call blocks). When the client
// goes away the agent's stream is cancelled at once: on a quiet server no chunk would come to
// notice it by, and the thread (and fleetd's shutdown) waited for the next line forever.
class LogRelay : public grpc::ServerWriteReactor<fleet::v1::LogChunk> {
 public:
  LogRelay(Daemon* daemon, fleet::v1::ServerLogsRequest request)
      : daemon_(daemon), request_(std::move(request)) {
    thread_ = std::thread([this] { Run(); });
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (ok) return;
      cancelled_ = true;
    }
    cancel_.Cancel();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    cancel_.Cancel();
  }

  void OnDone() override {
    thread_.join();
    delete this;
  }

 private:
  void Run() {
    absl::Status s = daemon_->Logs(
        request_,
        [this](const fleet::v1::LogChunk& chunk) {
          absl::MutexLock lock(&mu_);
          mu_.Await(absl::Condition(
              +[](LogRelay* r)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return !r->writing_ || r->cancelled_; },
              this));
          if (cancelled_) return false;
          chunk_ = chunk;
          writing_ = true;
          StartWrite(&chunk_);
          return true;
        },
        &cancel_);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](LogRelay* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return !r->writing_; }, this));
    Finish(cancelled_ ? grpc::Status::CANCELLED : ToGrpcStatus(s));
  }

  Daemon* const daemon_;
  const fleet::v1::ServerLogsRequest request_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  fleet::v1::LogChunk chunk_ ABSL_GUARDED_BY(mu_);
  CallCancel cancel_;  // ends the agent's stream
  std::thread thread_;
};

// The stored config, or an empty one before the first deploy (no hosts).
absl::StatusOr<fleet::v1::FleetConfig> ConfigOrEmpty(Daemon* daemon) {
  absl::StatusOr<std::optional<fleet::v1::FleetConfig>> config = daemon->CurrentConfig();
  if (!config.ok()) return config.status();
  return config->has_value() ? **std::move(config) : fleet::v1::FleetConfig();
}

}  // namespace

grpc::ServerUnaryReactor* FleetService::Deploy(grpc::CallbackServerContext* c,
                                               const fleet::v1::DeployRequest* request,
                                               fleet::v1::DeployResponse* response) {
  if (absl::Status s = Serves(c, "Deploy", false); !s.ok()) return Fail(c, s);
  return Answer(c, daemon_->Deploy(*request), response);
}

grpc::ServerUnaryReactor* FleetService::Status(grpc::CallbackServerContext* c,
                                               const fleet::v1::FleetStatusRequest* request,
                                               fleet::v1::FleetStatusResponse* response) {
  if (absl::Status s = Serves(c, "Status", true); !s.ok()) return Fail(c, s);
  daemon_->Status(*request, response);  // built in place, on the call's arena
  auto* reactor = c->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

// Status's request and response on an arena of their own: a fleet's table is tens of thousands
// of small allocations, made while the daemon's lock is held and freed in one go here.
class FleetService::StatusAllocator
    : public grpc::MessageAllocator<fleet::v1::FleetStatusRequest, fleet::v1::FleetStatusResponse> {
 public:
  grpc::MessageHolder<fleet::v1::FleetStatusRequest, fleet::v1::FleetStatusResponse>*
  AllocateMessages() override {
    return new Holder();
  }

 private:
  class Holder
      : public grpc::MessageHolder<fleet::v1::FleetStatusRequest, fleet::v1::FleetStatusResponse> {
   public:
    Holder() : arena_(Options()) {
      set_request(google::protobuf::Arena::CreateMessage<fleet::v1::FleetStatusRequest>(&arena_));
      set_response(google::protobuf::Arena::CreateMessage<fleet::v1::FleetStatusResponse>(&arena_));
    }
    void Release() override { delete this; }

   private:
    static google::protobuf::ArenaOptions Options() {
      google::protobuf::ArenaOptions o;
      o.start_block_size = 64 << 10;
      o.max_block_size = 1 << 20;
      return o;
    }
    google::protobuf::Arena arena_;
  };
};

FleetService::FleetService(Daemon* daemon, std::string state_dir,
                           std::function<LeaderView()> leader)
    : daemon_(daemon),
      state_dir_(std::move(state_dir)),
      leader_(std::move(leader)),
      status_allocator_(std::make_unique<StatusAllocator>()) {
  SetMessageAllocatorFor_Status(status_allocator_.get());
}

FleetService::~FleetService() = default;

absl::Status FleetService::Serves(grpc::CallbackServerContext* c, const char* verb, bool read) {
  if (!leader_) return absl::OkStatus();
  const LeaderView leader = leader_();
  if (leader.self) return absl::OkStatus();
  if (read) {
    // The leader's commits, at most a second old.
    if (absl::Status s = daemon_->Reload(absl::Seconds(1)); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("this fleetd stands by and cannot read the record: ", s.message()));
    }
    return absl::OkStatus();
  }
  if (leader.holder.empty()) {
    return absl::UnavailableError(absl::StrCat(
        verb, ": no fleetd leads the fleet right now (a takeover takes a few seconds): try again"));
  }
  if (leader.address.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(verb, ": this fleetd stands by; the leader is ", leader.holder,
                     ", which serves no --listen address: run fleetctl on its machine"));
  }
  c->AddTrailingMetadata(kLeaderMetadataKey, leader.address);
  return absl::FailedPreconditionError(absl::StrCat(verb, ": this fleetd stands by; the leader is ",
                                                    leader.holder, " at ", leader.address,
                                                    " (fleetctl --server ", leader.address, ")"));
}

grpc::ServerWriteReactor<fleet::v1::FleetStatusResponse>* FleetService::Watch(
    grpc::CallbackServerContext* c, const fleet::v1::FleetStatusRequest* request) {
  if (absl::Status s = Serves(c, "Watch", false); !s.ok()) {
    return new RefusedStream<fleet::v1::FleetStatusResponse>(s);
  }
  return new WatchStream(daemon_, *request);
}

grpc::ServerWriteReactor<fleet::v1::FleetEventsResponse>* FleetService::FleetEvents(
    grpc::CallbackServerContext* c, const fleet::v1::FleetEventsRequest* request) {
  if (absl::Status s = Serves(c, "FleetEvents", false); !s.ok()) {
    return new RefusedStream<fleet::v1::FleetEventsResponse>(s);
  }
  return new FleetEventsStream(daemon_, *request);
}

grpc::ServerWriteReactor<fleet::v1::LogChunk>* FleetService::Logs(
    grpc::CallbackServerContext* c, const fleet::v1::ServerLogsRequest* request) {
  if (absl::Status s = Serves(c, "Logs", false); !s.ok()) {
    return new RefusedStream<fleet::v1::LogChunk>(s);
  }
  return new LogRelay(daemon_, *request);
}

grpc::ServerUnaryReactor* FleetService::ListAttempts(grpc::CallbackServerContext* c,
                                                     const fleet::v1::ListAttemptsRequest* request,
                                                     fleet::v1::ListAttemptsResponse* response) {
  if (absl::Status s = Serves(c, "ListAttempts", true); !s.ok()) return Fail(c, s);
  return Answer(c, daemon_->ListAttempts(*request), response);
}

grpc::ServerUnaryReactor* FleetService::Explain(grpc::CallbackServerContext* c,
                                                const fleet::v1::ExplainRequest* request,
                                                fleet::v1::ExplainResponse* response) {
  if (absl::Status s = Serves(c, "Explain", true); !s.ok()) return Fail(c, s);
  return Answer(c, daemon_->Explain(*request), response);
}

grpc::ServerUnaryReactor* FleetService::Plan(grpc::CallbackServerContext* c,
                                             const fleet::v1::PlanRequest* request,
                                             fleet::v1::PlanResponse* response) {
  if (absl::Status s = Serves(c, "Plan", false); !s.ok()) return Fail(c, s);
  // Blocks on the agent's probe (seconds): a CLI request, not on any hot path.
  return Answer(c, WithPlansRedacted(daemon_->Plan(*request)), response);
}

grpc::ServerUnaryReactor* FleetService::ApplyPlan(grpc::CallbackServerContext* c,
                                                  const fleet::v1::ApplyPlanRequest* request,
                                                  fleet::v1::ApplyPlanResponse* response) {
  if (absl::Status s = Serves(c, "ApplyPlan", false); !s.ok()) return Fail(c, s);
  // Blocks while the agent applies it (a pip install may take minutes): `fleetctl apply` waits
  // for the outcome it prints.
  return Answer(c, WithPlansRedacted(daemon_->ApplyPlan(*request)), response);
}

grpc::ServerUnaryReactor* FleetService::ListRemediations(
    grpc::CallbackServerContext* c, const fleet::v1::ListRemediationsRequest* request,
    fleet::v1::ListRemediationsResponse* response) {
  if (absl::Status s = Serves(c, "ListRemediations", true); !s.ok()) return Fail(c, s);
  return Answer(c, WithPlansRedacted(daemon_->ListRemediations(*request)), response);
}

grpc::ServerUnaryReactor* FleetService::Restart(grpc::CallbackServerContext* c,
                                                const fleet::v1::ServersRequest* request,
                                                fleet::v1::ServersResponse* response) {
  if (absl::Status s = Serves(c, "Restart", false); !s.ok()) return Fail(c, s);
  return Answer(c, daemon_->Restart(*request), response);
}

grpc::ServerUnaryReactor* FleetService::Stop(grpc::CallbackServerContext* c,
                                             const fleet::v1::ServersRequest* request,
                                             fleet::v1::ServersResponse* response) {
  if (absl::Status s = Serves(c, "Stop", false); !s.ok()) return Fail(c, s);
  return Answer(c, daemon_->Stop(*request), response);
}

grpc::ServerUnaryReactor* FleetService::TrustHost(grpc::CallbackServerContext* c,
                                                  const fleet::v1::TrustHostRequest* request,
                                                  fleet::v1::TrustHostResponse* response) {
  if (absl::Status s = Serves(c, "TrustHost", false); !s.ok()) return Fail(c, s);
  // Connects to the host (blocks up to its connect timeout, per round trip): a CLI request, on no
  // hot path. The config comes from the record, so the daemon's state lock is never held.
  absl::StatusOr<fleet::v1::FleetConfig> config = ConfigOrEmpty(daemon_);
  if (!config.ok()) return Fail(c, config.status());
  return Answer(c, TrustConfiguredHost(*config, state_dir_, *request), response);
}

grpc::ServerUnaryReactor* FleetService::ListHosts(grpc::CallbackServerContext* c,
                                                  const fleet::v1::ListHostsRequest* request,
                                                  fleet::v1::ListHostsResponse* response) {
  if (absl::Status s = Serves(c, "ListHosts", true); !s.ok()) return Fail(c, s);
  // Reads the known_hosts files, no connection.
  absl::StatusOr<fleet::v1::FleetConfig> config = ConfigOrEmpty(daemon_);
  if (!config.ok()) return Fail(c, config.status());
  return Answer<fleet::v1::ListHostsResponse>(c, ListConfiguredHosts(*config, state_dir_),
                                              response);
}

}  // namespace fleet::daemon

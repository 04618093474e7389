#include "agent/agent_service.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "agent/event_stream.h"
#include "agent/log_follower.h"
#include "common/base/rpc_limits.h"
#include "common/net/grpc_status.h"

namespace fleet::agent {

void SetMessageLimits(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kAgentRpcMaxMessageBytes);
  builder->SetMaxSendMessageSize(kAgentRpcMaxMessageBytes);
}

namespace {

// A server's log: the last `tail_lines` lines (all when 0), then, when following, what is
// appended, until the client cancels. Reads with a LogFollower on a thread of its own.
class LogStream : public grpc::ServerWriteReactor<fleet::v1::LogChunk>, public LogFollower::Sink {
 public:
  LogStream(std::string path, int64_t tail_lines, bool follow)
      : path_(std::move(path)), tail_lines_(tail_lines), follow_(follow) {
    cancel_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { Run(); });
  }

  void OnData(std::string_view bytes) override {
    if (skip_ > 0) {
      const size_t n = std::min<size_t>(skip_, bytes.size());
      skip_ -= static_cast<int64_t>(n);
      bytes.remove_prefix(n);
    }
    if (!bytes.empty()) Send(std::string(bytes));
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) broken_ = true;
  }

  void OnCancel() override { Cancel(); }

  void OnDone() override {
    Cancel();
    thread_.join();
    close(cancel_);
    delete this;
  }

 private:
  void Cancel() {
    const uint64_t one = 1;
    ssize_t n = write(cancel_, &one, sizeof(one));
    static_cast<void>(n);
  }

  // Blocks the reader until the previous chunk is written: gRPC allows one write at a time.
  void Send(std::string data) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](LogStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->writing_; }, this));
    if (broken_) return;
    chunk_.set_first_line(0);
    chunk_.set_data(std::move(data));
    writing_ = true;
    StartWrite(&chunk_);
  }

  bool Cancelled() const {
    pollfd p{cancel_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }

  void Run() {
    skip_ = TailStart();
    auto follower = LogFollower::Create(path_, 0, this, {});
    if (!follower.ok()) {
      Finish(ToGrpcStatus(follower.status()));
      return;
    }
    absl::Status s = (*follower)->Poll();
    while (s.ok() && follow_ && !Cancelled()) {
      pollfd fds[2] = {{(*follower)->fd(), POLLIN, 0}, {cancel_, POLLIN, 0}};
      if (poll(fds, 2, 2000) < 0 && errno != EINTR) break;
      if (fds[1].revents & POLLIN) break;
      s = (*follower)->Poll();
    }
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](LogStream* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu_) { return !st->writing_; }, this));
    Finish(s.ok() ? grpc::Status::OK : ToGrpcStatus(s));
  }

  // Byte offset where the last `tail_lines_` lines begin (0: from the start).
  int64_t TailStart() const {
    if (tail_lines_ <= 0) return 0;
    const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const off_t size = lseek(fd, 0, SEEK_END);
    off_t pos = size;
    int64_t newlines = 0;
    char buf[8192];
    while (pos > 0) {
      const off_t len = std::min<off_t>(pos, sizeof(buf));
      pos -= len;
      if (pread(fd, buf, static_cast<size_t>(len), pos) != len) break;
      for (off_t i = len - 1; i >= 0; --i) {
        // The last line's own newline does not count.
        if (buf[i] == '\n' && pos + i != size - 1 && ++newlines == tail_lines_) {
          close(fd);
          return pos + i + 1;
        }
      }
    }
    close(fd);
    return 0;
  }

  const std::string path_;
  const int64_t tail_lines_;
  const bool follow_;
  int cancel_ = -1;
  int64_t skip_ = 0;  // bytes before the tail, dropped as they are read
  absl::Mutex mu_;
  fleet::v1::LogChunk chunk_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A stream that ends at once with an error.
template <typename T>
class FailedStream : public grpc::ServerWriteReactor<T> {
 public:
  explicit FailedStream(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

AgentService::AgentService(Agent* agent) : agent_(agent) {
  worker_ = std::thread([this] { WorkLoop(); });
}

AgentService::~AgentService() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

void AgentService::Enqueue(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(std::move(job));
}

void AgentService::WorkLoop() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AgentService* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stopping_ || !s->jobs_.empty(); },
          this));
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

grpc::ServerUnaryReactor* AgentService::Launch(grpc::CallbackServerContext* context,
                                               const fleet::v1::LaunchRequest* request,
                                               fleet::v1::LaunchResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (absl::Status fenced = agent_->AdmitFence(request->fence()); !fenced.ok()) {
    reactor->Finish(ToGrpcStatus(fenced));
    return reactor;
  }
  absl::StatusOr<fleet::v1::LaunchResponse> r = agent_->Launch(*request);
  if (r.ok()) *response = *std::move(r);
  reactor->Finish(ToGrpcStatus(r.status()));
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::Stop(grpc::CallbackServerContext* context,
                                             const fleet::v1::StopRequest* request,
                                             fleet::v1::StopResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (absl::Status fenced = agent_->AdmitFence(request->fence()); !fenced.ok()) {
    reactor->Finish(ToGrpcStatus(fenced));
    return reactor;
  }
  absl::StatusOr<fleet::v1::StopResponse> r = agent_->Stop(*request);
  if (r.ok()) *response = *std::move(r);
  reactor->Finish(ToGrpcStatus(r.status()));
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::Status(grpc::CallbackServerContext* context,
                                               const fleet::v1::StatusRequest* request,
                                               fleet::v1::StatusResponse* response) {
  auto* reactor = context->DefaultReactor();
  *response = agent_->Status();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<fleet::v1::AgentEvent>* AgentService::Events(
    grpc::CallbackServerContext* context, const fleet::v1::EventsRequest* request) {
  return new EventStream<fleet::v1::AgentEvent>(agent_, *request);
}

grpc::ServerWriteReactor<fleet::v1::EventBatch>* AgentService::EventBatches(
    grpc::CallbackServerContext* context, const fleet::v1::EventsRequest* request) {
  return new EventStream<fleet::v1::EventBatch>(agent_, *request);
}

grpc::ServerWriteReactor<fleet::v1::LogChunk>* AgentService::Logs(
    grpc::CallbackServerContext* context, const fleet::v1::LogsRequest* request) {
  const std::string path = agent_->LogPath(request->server().gpu(), request->attempt_number());
  if (path.empty()) {
    return new FailedStream<fleet::v1::LogChunk>(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("logs: no log for gpu ", request->server().gpu(),
                                  request->attempt_number() > 0
                                      ? absl::StrCat(" attempt ", request->attempt_number())
                                      : "")));
  }
  return new LogStream(path, request->tail_lines(), request->follow());
}

grpc::ServerUnaryReactor* AgentService::Probe(grpc::CallbackServerContext* context,
                                              const fleet::v1::ProbeRequest* request,
                                              fleet::v1::ProbeResponse* response) {
  auto* reactor = context->DefaultReactor();
  Enqueue([this, reactor, request, response] {
    *response->mutable_snapshot() = agent_->Probe(request->spec());
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::Apply(grpc::CallbackServerContext* context,
                                              const fleet::v1::ApplyRequest* request,
                                              fleet::v1::ApplyResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (absl::Status fenced = agent_->AdmitFence(request->fence()); !fenced.ok()) {
    reactor->Finish(ToGrpcStatus(fenced));
    return reactor;
  }
  Enqueue([this, reactor, request, response] {
    *response = agent_->Apply(*request);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

}  // namespace fleet::agent

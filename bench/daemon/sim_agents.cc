// fleet-sim-agents: many simulated fleet-agents in one process, for the daemon's scale benchmark
// (bench/daemon/run.sh; BENCHMARKS.md, "fleetd at scale"). A thousand real agent processes would
// not fit the benchmark machine, so this program serves fleet.v1.Agent (proto/agent.proto) for
// --containers containers, each on a unix socket of its own (SOCKET_DIR/CTID.sock, one gRPC server
// per container: the daemon needs a distinct target per container), over real gRPC.
//
// It is a simulator, not an agent: no process is started, no log is read. Each container has an
// incarnation and an event log with sequences 1, 2, 3, ... as a real agent's; Launch (idempotent
// on the attempt id) answers STARTING and queues the server's startup script:
//
//   STARTING, LOADING, then JIT ops (JIT_COMPILING <op> and progress 1/S .. S/S per op),
//   CAPTURING_GRAPHS, a ReadyEvent, READY
//
// --events-per-server events in all (the number of ops follows), emitted by one generator thread
// round-robin over the servers that are starting, at --rate events per second for the whole
// process (0: as fast as the generator runs; the streams then deliver a backlog). Events streams
// resume from (incarnation, sequence) as the agent's do. Status gives a snapshot with the stream
// position; Stop stops a server (STOPPED); Probe answers a healthy toolchain (so that fleetd's
// preflight passes); Logs and Apply are not simulated.
//
// When every server of every container has been launched and has emitted its whole script, it
// writes --report (atomically): one line per container with its incarnation and last sequence,
// and the times of the first and last launch and event (unix ms). It serves until SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/event_stream.h"
#include "common/base/flag_set.h"
#include "common/state/states.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/agent.grpc.pb.h"
#include "tests/testing/planner_testing.h"

namespace fleet::bench {
namespace {

using fleet::v1::AgentEvent;
using google::protobuf::util::TimeUtil;

// flashinfer-like JIT op names, for JIT_COMPILING's detail.
constexpr const char* kOps[] = {
    "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_head_dim_qk_128",
    "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_head_dim_qk_128",
    "single_prefill_with_kv_cache_dtype_q_bf16_head_dim_128_posenc_0",
    "rmsnorm",
    "silu_and_mul",
    "rope_pos_ids",
    "top_k_top_p_sampling_from_probs",
    "cascade_merge_state",
};

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

// What the event at `index` (0-based) of a server's startup script is. `total` events in all;
// ops of `steps` progress events each, the last op possibly shorter.
void ScriptEvent(int64_t index, int64_t total, int64_t steps, AgentEvent* e, absl::Duration age) {
  if (index == 0) {
    SetServerState(fleet::v1::SERVER_STATE_STARTING, e->mutable_phase());
  } else if (index == 1) {
    SetServerState(fleet::v1::SERVER_STATE_LOADING, e->mutable_phase());
    e->mutable_phase()->set_log_line(3);
  } else if (index == total - 3) {
    SetServerState(fleet::v1::SERVER_STATE_CAPTURING_GRAPHS, e->mutable_phase());
    e->mutable_phase()->set_detail("cuda graph bs [1, 2, 4, 8, 16, 32]");
    e->mutable_phase()->set_log_line(100 + index);
  } else if (index == total - 2) {
    e->mutable_ready()->set_http_status(200);
    *e->mutable_ready()->mutable_time_to_ready() =
        TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(age));
  } else if (index == total - 1) {
    SetServerState(fleet::v1::SERVER_STATE_READY, e->mutable_phase());
  } else {
    // The JIT part: blocks of 1 + steps events from index 2 up to total - 4.
    const int64_t jit = index - 2;
    const int64_t op = jit / (steps + 1);
    const int64_t within = jit % (steps + 1);
    const int64_t jit_events = total - 5;
    const int64_t op_steps = std::min(steps, jit_events - op * (steps + 1) - 1);
    if (within == 0) {
      SetServerState(fleet::v1::SERVER_STATE_JIT_COMPILING, e->mutable_phase());
      e->mutable_phase()->set_detail(kOps[op % (sizeof(kOps) / sizeof(kOps[0]))]);
      e->mutable_phase()->set_log_line(10 + index);
    } else {
      e->mutable_progress()->set_step(within);
      e->mutable_progress()->set_total(op_steps);
      e->mutable_progress()->set_log_line(10 + index);
    }
  }
}

class SimAgent;

class Sim {
 public:
  Sim(int64_t containers, int64_t gpus, double rate, int64_t events_per_server, int64_t steps)
      : expected_servers_(containers * gpus),
        rate_(rate),
        events_per_server_(events_per_server),
        steps_(steps) {}

  int64_t events_per_server() const { return events_per_server_; }
  int64_t steps() const { return steps_; }

  // A server was launched: its script (after STARTING, which Launch emits) is due.
  void Activate(SimAgent* agent, int32_t gpu) {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (first_launch_ == absl::InfinitePast()) first_launch_ = now;
    last_launch_ = now;
    ++launched_;
    active_.push_back({agent, gpu});
  }

  // Runs the generator until Stop().
  void Run();
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }

  // True once every expected server has been launched and has finished its script.
  bool Done() {
    absl::MutexLock lock(&mu_);
    return launched_ >= expected_servers_ && active_.empty();
  }

  void NoteEvent(absl::Time t) {
    absl::MutexLock lock(&mu_);
    if (first_event_ == absl::InfinitePast()) first_event_ = t;
    last_event_ = t;
  }

  std::string TimesReport() {
    absl::MutexLock lock(&mu_);
    return absl::StrCat("first_launch_ms ", UnixMs(first_launch_), "\nlast_launch_ms ",
                        UnixMs(last_launch_), "\nfirst_event_ms ", UnixMs(first_event_),
                        "\nlast_event_ms ", UnixMs(last_event_), "\nlaunched ", launched_, "\n");
  }

 private:
  struct Active {
    SimAgent* agent;
    int32_t gpu;
  };

  const int64_t expected_servers_;
  const double rate_;
  const int64_t events_per_server_;
  const int64_t steps_;
  absl::Mutex mu_;
  std::vector<Active> active_ ABSL_GUARDED_BY(mu_);
  int64_t launched_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time first_launch_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_launch_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time first_event_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_event_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// One simulated container's agent.
class SimAgent final : public fleet::v1::Agent::CallbackService, public fleet::agent::EventSource {
 public:
  SimAgent(Sim* sim, std::string host, std::string ctid, int32_t gpus)
      : sim_(sim), host_(std::move(host)), ctid_(std::move(ctid)), gpus_(gpus) {
    unsigned char bytes[6];
    FILE* f = fopen("/dev/urandom", "rb");
    if (f == nullptr || fread(bytes, 1, sizeof(bytes), f) != sizeof(bytes)) {
      for (auto& b : bytes) b = static_cast<unsigned char>(rand());
    }
    if (f != nullptr) fclose(f);
    incarnation_ = "sim-";
    for (unsigned char b : bytes) absl::StrAppendFormat(&incarnation_, "%02x", b);
  }

  std::string name() const { return absl::StrCat(host_, "/", ctid_); }

  grpc::ServerUnaryReactor* Launch(grpc::CallbackServerContext* c,
                                   const fleet::v1::LaunchRequest* request,
                                   fleet::v1::LaunchResponse* response) override;
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* c,
                                 const fleet::v1::StopRequest* request,
                                 fleet::v1::StopResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* c,
                                   const fleet::v1::StatusRequest* request,
                                   fleet::v1::StatusResponse* response) override;
  grpc::ServerWriteReactor<AgentEvent>* Events(grpc::CallbackServerContext* c,
                                               const fleet::v1::EventsRequest* request) override;
  grpc::ServerWriteReactor<fleet::v1::EventBatch>* EventBatches(
      grpc::CallbackServerContext* c, const fleet::v1::EventsRequest* request) override;
  grpc::ServerWriteReactor<fleet::v1::LogChunk>* Logs(
      grpc::CallbackServerContext* c, const fleet::v1::LogsRequest* request) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* c,
                                  const fleet::v1::ProbeRequest* request,
                                  fleet::v1::ProbeResponse* response) override;
  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* c,
                                  const fleet::v1::ApplyRequest* request,
                                  fleet::v1::ApplyResponse* response) override;

  // The generator: the next event of `gpu`'s script. False when its script is done.
  bool EmitNext(int32_t gpu, absl::Time now);
  // Wakes the streams after events were emitted.
  void Notify();
  // Breaks every open event stream (ended after its write in progress).
  void BreakStreams();
  int64_t streams_broken() {
    absl::MutexLock lock(&mu_);
    return streams_broken_;
  }

  // Events after a position, at most `limit`; a Resync when the position is not ours.
  std::vector<AgentEvent> EventsAfter(const std::string& incarnation, uint64_t after,
                                      size_t limit) override;
  void Subscribe(fleet::agent::EventSubscriber* s) override;
  void Unsubscribe(fleet::agent::EventSubscriber* s) override;

  std::string ReportLine() {
    absl::MutexLock lock(&mu_);
    int64_t launches = 0;
    for (const auto& [gpu, s] : servers_) launches += s.launches;
    return absl::StrCat("container ", name(), " ", incarnation_, " ", log_.size(), " ", launches,
                        "\n");
  }

 private:
  struct Server {
    std::string attempt_id;
    int64_t attempt_number = 0;
    fleet::v1::ServerState state = fleet::v1::SERVER_STATE_PENDING;
    std::string detail;
    int64_t step = 0;
    int64_t total = 0;
    int64_t next = 0;  // index of the next script event
    absl::Time launched_at;
    int64_t launches = 0;
  };

  void Emit(AgentEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  fleet::v1::ServerStatus StatusOf(int32_t gpu, const Server& s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Sim* const sim_;
  const std::string host_;
  const std::string ctid_;
  const int32_t gpus_;
  std::string incarnation_;
  absl::Mutex notify_mu_;  // held while streams are told: Unsubscribe waits for it
  absl::Mutex mu_;
  std::vector<AgentEvent> log_ ABSL_GUARDED_BY(mu_);  // sequence i + 1 at [i]
  std::map<int32_t, Server> servers_ ABSL_GUARDED_BY(mu_);
  std::set<fleet::agent::EventSubscriber*> subscribers_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  int64_t streams_broken_ ABSL_GUARDED_BY(mu_) = 0;
};

template <typename T>
class FailedStream : public grpc::ServerWriteReactor<T> {
 public:
  explicit FailedStream(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* c, grpc::Status status) {
  auto* reactor = c->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

void SimAgent::Emit(AgentEvent e) {
  e.set_incarnation(incarnation_);
  e.set_sequence(log_.size() + 1);
  const absl::Time now = absl::Now();
  *e.mutable_at() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(now));
  if (e.has_phase()) {
    Server& s = servers_[e.server().gpu()];
    s.state = ServerStateOf(e.phase());
    s.detail = e.phase().detail();
  } else if (e.has_progress()) {
    Server& s = servers_[e.server().gpu()];
    s.step = e.progress().step();
    s.total = e.progress().total();
  }
  log_.push_back(std::move(e));
  pending_ = true;
  sim_->NoteEvent(now);
}

fleet::v1::ServerStatus SimAgent::StatusOf(int32_t gpu, const Server& s) const {
  fleet::v1::ServerStatus st;
  st.mutable_server()->set_host(host_);
  st.mutable_server()->set_container(ctid_);
  st.mutable_server()->set_gpu(gpu);
  st.set_attempt_id(s.attempt_id);
  st.set_attempt_number(s.attempt_number);
  SetServerState(s.state, &st);
  st.set_phase_detail(s.detail);
  st.set_progress_step(s.step);
  st.set_progress_total(s.total);
  st.set_pid(s.attempt_id.empty() ? 0 : 100000 + gpu);
  *st.mutable_started_at() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(s.launched_at));
  return st;
}

grpc::ServerUnaryReactor* SimAgent::Launch(grpc::CallbackServerContext* c,
                                           const fleet::v1::LaunchRequest* request,
                                           fleet::v1::LaunchResponse* response) {
  const int32_t gpu = request->spec().server().gpu();
  if (gpu < 0 || gpu >= gpus_ || request->attempt_id().empty()) {
    return Answer(c, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "launch: bad gpu or id"));
  }
  bool activate = false;
  {
    absl::MutexLock lock(&mu_);
    Server& s = servers_[gpu];
    if (s.attempt_id == request->attempt_id()) {
      response->set_already_running(true);
    } else {
      const bool alive =
          s.state != fleet::v1::SERVER_STATE_PENDING && s.state != fleet::v1::SERVER_STATE_READY &&
          s.state != fleet::v1::SERVER_STATE_STOPPED && s.state != fleet::v1::SERVER_STATE_FAILED;
      if (alive && !s.attempt_id.empty()) {
        return Answer(c, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                      absl::StrCat("gpu ", gpu, " runs attempt ", s.attempt_id)));
      }
      s = Server();
      s.attempt_id = request->attempt_id();
      s.attempt_number = request->attempt_number();
      s.launched_at = absl::Now();
      s.launches = 1;
      s.next = 1;
      AgentEvent e;
      e.mutable_server()->set_host(host_);
      e.mutable_server()->set_container(ctid_);
      e.mutable_server()->set_gpu(gpu);
      e.set_attempt_id(s.attempt_id);
      ScriptEvent(0, sim_->events_per_server(), sim_->steps(), &e, absl::ZeroDuration());
      Emit(std::move(e));
      activate = true;
    }
    *response->mutable_status() = StatusOf(gpu, servers_[gpu]);
  }
  if (activate) {
    sim_->Activate(this, gpu);
    Notify();
  }
  return Answer(c, grpc::Status::OK);
}

grpc::ServerUnaryReactor* SimAgent::Stop(grpc::CallbackServerContext* c,
                                         const fleet::v1::StopRequest* request,
                                         fleet::v1::StopResponse* response) {
  const int32_t gpu = request->server().gpu();
  {
    absl::MutexLock lock(&mu_);
    auto it = servers_.find(gpu);
    if (it == servers_.end()) {
      return Answer(c, grpc::Status(grpc::StatusCode::NOT_FOUND, "stop: no such server"));
    }
    if (it->second.state != fleet::v1::SERVER_STATE_STOPPED) {
      AgentEvent e;
      e.mutable_server()->set_host(host_);
      e.mutable_server()->set_container(ctid_);
      e.mutable_server()->set_gpu(gpu);
      e.set_attempt_id(it->second.attempt_id);
      SetServerState(fleet::v1::SERVER_STATE_STOPPED, e.mutable_phase());
      Emit(std::move(e));
      it->second.next = sim_->events_per_server();  // the generator drops it
    }
    *response->mutable_status() = StatusOf(gpu, it->second);
  }
  Notify();
  return Answer(c, grpc::Status::OK);
}

grpc::ServerUnaryReactor* SimAgent::Status(grpc::CallbackServerContext* c,
                                           const fleet::v1::StatusRequest* request,
                                           fleet::v1::StatusResponse* response) {
  absl::MutexLock lock(&mu_);
  response->set_incarnation(incarnation_);
  response->set_sequence(log_.size());
  response->set_agent_version("fleet-sim-agents");
  for (const auto& [gpu, s] : servers_) *response->add_servers() = StatusOf(gpu, s);
  return Answer(c, grpc::Status::OK);
}

grpc::ServerWriteReactor<AgentEvent>* SimAgent::Events(grpc::CallbackServerContext* c,
                                                       const fleet::v1::EventsRequest* request) {
  return new fleet::agent::EventStream<AgentEvent>(this, *request);
}

grpc::ServerWriteReactor<fleet::v1::EventBatch>* SimAgent::EventBatches(
    grpc::CallbackServerContext* c, const fleet::v1::EventsRequest* request) {
  return new fleet::agent::EventStream<fleet::v1::EventBatch>(this, *request);
}

grpc::ServerWriteReactor<fleet::v1::LogChunk>* SimAgent::Logs(
    grpc::CallbackServerContext* c, const fleet::v1::LogsRequest* request) {
  return new FailedStream<fleet::v1::LogChunk>(
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "fleet-sim-agents: no logs"));
}

grpc::ServerUnaryReactor* SimAgent::Probe(grpc::CallbackServerContext* c,
                                          const fleet::v1::ProbeRequest* request,
                                          fleet::v1::ProbeResponse* response) {
  // A healthy container (the planner's "fixed" toolchain: CUDA 13.2 throughout, ninja, the link
  // layout): fleetd's preflight finds nothing to fix and the servers launch. Unanswered, the
  // preflight held every server PENDING (issue 13).
  *response->mutable_snapshot() = fleet::daemon::plannertest::FixedSnapshot();
  return Answer(c, grpc::Status::OK);
}

grpc::ServerUnaryReactor* SimAgent::Apply(grpc::CallbackServerContext* c,
                                          const fleet::v1::ApplyRequest* request,
                                          fleet::v1::ApplyResponse* response) {
  return Answer(c, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "fleet-sim-agents: no apply"));
}

bool SimAgent::EmitNext(int32_t gpu, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Server& s = servers_[gpu];
  const int64_t total = sim_->events_per_server();
  if (s.next >= total) return false;
  AgentEvent e;
  e.mutable_server()->set_host(host_);
  e.mutable_server()->set_container(ctid_);
  e.mutable_server()->set_gpu(gpu);
  e.set_attempt_id(s.attempt_id);
  ScriptEvent(s.next, total, sim_->steps(), &e, now - s.launched_at);
  ++s.next;
  Emit(std::move(e));
  return s.next < total;
}

void SimAgent::Notify() {
  absl::MutexLock notify(&notify_mu_);
  std::vector<fleet::agent::EventSubscriber*> to_notify;
  {
    absl::MutexLock lock(&mu_);
    if (!pending_) return;
    pending_ = false;
    to_notify.assign(subscribers_.begin(), subscribers_.end());
  }
  for (fleet::agent::EventSubscriber* s : to_notify) s->OnEventsAvailable();
}

void SimAgent::BreakStreams() {
  absl::MutexLock notify(&notify_mu_);  // the streams stay (Unsubscribe waits for it)
  std::vector<fleet::agent::EventSubscriber*> streams;
  {
    absl::MutexLock lock(&mu_);
    streams.assign(subscribers_.begin(), subscribers_.end());
    streams_broken_ += static_cast<int64_t>(streams.size());
  }
  // Ended (UNAVAILABLE, as when an agent goes away) once its write in progress is done: the
  // daemon must come back and resume from its cursor, losing and repeating nothing.
  const grpc::Status broken(grpc::StatusCode::UNAVAILABLE,
                            "fleet-sim-agents: stream broken on purpose");
  for (fleet::agent::EventSubscriber* s : streams) {
    if (auto* b = dynamic_cast<fleet::agent::EventStream<fleet::v1::EventBatch>*>(s)) {
      b->EndAfterWrite(broken);
    } else if (auto* e = dynamic_cast<fleet::agent::EventStream<AgentEvent>*>(s)) {
      e->EndAfterWrite(broken);
    }
  }
}

std::vector<AgentEvent> SimAgent::EventsAfter(const std::string& incarnation, uint64_t after,
                                              size_t limit) {
  absl::MutexLock lock(&mu_);
  std::vector<AgentEvent> out;
  if (incarnation != incarnation_ || after > log_.size()) {
    AgentEvent resync;
    resync.set_incarnation(incarnation_);
    resync.set_sequence(log_.size());
    *resync.mutable_at() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now()));
    resync.mutable_resync()->set_previous_incarnation(incarnation);
    resync.mutable_resync()->set_first_sequence(1);
    out.push_back(std::move(resync));
    return out;
  }
  for (uint64_t i = after; i < log_.size() && out.size() < limit; ++i) out.push_back(log_[i]);
  return out;
}

void SimAgent::Subscribe(fleet::agent::EventSubscriber* s) {
  absl::MutexLock lock(&mu_);
  subscribers_.insert(s);
}

void SimAgent::Unsubscribe(fleet::agent::EventSubscriber* s) {
  absl::MutexLock notify(&notify_mu_);
  absl::MutexLock lock(&mu_);
  subscribers_.erase(s);
}

void Sim::Run() {
  constexpr absl::Duration kTick = absl::Milliseconds(2);
  double budget = 0;
  absl::Time last = absl::Now();
  size_t cursor = 0;
  while (true) {
    absl::SleepFor(kTick);
    const absl::Time now = absl::Now();
    const double elapsed = absl::ToDoubleSeconds(now - last);
    last = now;
    std::vector<Active> batch;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (active_.empty()) {
        budget = 0;
        continue;
      }
      int64_t n;
      if (rate_ > 0) {
        // At most 50 ms worth at once: a stalled generator does not make a burst.
        budget = std::min(budget + rate_ * elapsed, rate_ * 0.05 + 1);
        n = static_cast<int64_t>(budget);
        budget -= static_cast<double>(n);
      } else {
        n = 20000;
      }
      // Round-robin over the starting servers: the next `n` events.
      batch.reserve(static_cast<size_t>(n));
      for (int64_t i = 0; i < n && !active_.empty(); ++i) {
        if (cursor >= active_.size()) cursor = 0;
        batch.push_back(active_[cursor]);
        ++cursor;
      }
    }
    std::set<SimAgent*> touched;
    std::vector<Active> finished;
    for (const Active& a : batch) {
      if (!a.agent->EmitNext(a.gpu, now)) finished.push_back(a);
      touched.insert(a.agent);
    }
    if (!finished.empty()) {
      absl::MutexLock lock(&mu_);
      std::set<std::pair<SimAgent*, int32_t>> gone;
      for (const Active& a : finished) gone.insert({a.agent, a.gpu});
      active_.erase(std::remove_if(active_.begin(), active_.end(),
                                   [&](const Active& a) {
                                     return gone.count({a.agent, a.gpu});
                                   }),
                    active_.end());
    }
    for (SimAgent* agent : touched) agent->Notify();
  }
}

}  // namespace
}  // namespace fleet::bench

int main(int argc, char** argv) {
  using fleet::bench::Sim;
  using fleet::bench::SimAgent;
  std::vector<std::string> args(argv + 1, argv + argc);
  int64_t containers = 10;
  int64_t gpus = 8;
  int64_t first_ctid = 1000;
  int64_t events_per_server = 100;
  int64_t steps = 8;
  double rate = 25000;
  int64_t break_ms = 0;
  std::string host = "local";
  std::string socket_dir;
  std::string ready_file;
  std::string report;
  fleet::FlagSet flags(
      "fleet-sim-agents --socket-dir DIR [flags]",
      "Simulated fleet-agents for the daemon's scale benchmark: one gRPC server per container on\n"
      "DIR/CTID.sock, CTIDs FIRST_CTID, FIRST_CTID+1, ...; each Launch plays a server's startup\n"
      "as events (STARTING, LOADING, JIT_COMPILING + progress, CAPTURING_GRAPHS, READY).");
  flags.AddInt("containers", '\0', &containers, "simulated containers (agents)");
  flags.AddInt("gpus", '\0', &gpus, "GPUs (servers) per container");
  flags.AddInt("first-ctid", '\0', &first_ctid, "CTID of the first container");
  flags.AddString("host", '\0', &host, "host name the containers belong to");
  flags.AddInt("events-per-server", '\0', &events_per_server,
               "events in each server's startup, STARTING to READY (at least 7)");
  flags.AddInt("steps-per-op", '\0', &steps, "progress events per JIT op");
  flags.AddDouble("rate", '\0', &rate, "events per second, all servers together (0: unpaced)");
  flags.AddString("socket-dir", '\0', &socket_dir, "where the agents' sockets go", "DIR");
  flags.AddInt("break-streams-ms", '\0', &break_ms,
               "every N ms, break the event streams of a tenth of the agents (0: never)", "N");
  flags.AddString("ready-file", '\0', &ready_file, "written once every agent serves", "FILE");
  flags.AddString("report", '\0', &report, "written when every server has reached READY", "FILE");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "fleet-sim-agents: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (socket_dir.empty() || containers < 1 || gpus < 1 || steps < 1) {
    std::cerr << "fleet-sim-agents: --socket-dir is required; counts must be positive\n";
    return 2;
  }
  events_per_server = std::max<int64_t>(events_per_server, 7);

  signal(SIGPIPE, SIG_IGN);
  // As fleetd does: no lock-order graph on every nested lock (Debian's Abseil has it on).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Sim sim(containers, gpus, rate, events_per_server, steps);
  std::vector<std::unique_ptr<SimAgent>> agents;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  for (int64_t i = 0; i < containers; ++i) {
    const std::string ctid = absl::StrCat(first_ctid + i);
    auto agent = std::make_unique<SimAgent>(&sim, host, ctid, static_cast<int32_t>(gpus));
    const std::string path = absl::StrCat(socket_dir, "/", ctid, ".sock");
    unlink(path.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
    builder.RegisterService(agent.get());
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (server == nullptr) {
      std::cerr << "fleet-sim-agents: cannot serve on " << path << "\n";
      return 1;
    }
    agents.push_back(std::move(agent));
    servers.push_back(std::move(server));
  }
  if (!ready_file.empty()) {
    std::ofstream(ready_file) << containers << "\n";
  }
  std::cerr << "fleet-sim-agents: " << containers << " agents on " << socket_dir << "/*.sock\n";

  std::atomic<bool> stop{false};
  std::thread generator([&sim] { sim.Run(); });
  // Reports once everything is READY (looked at every 20 ms).
  std::thread reporter([&] {
    while (!stop.load()) {
      absl::SleepFor(absl::Milliseconds(20));
      if (!sim.Done()) continue;
      std::string text = sim.TimesReport();
      int64_t broken = 0;
      for (auto& a : agents) broken += a->streams_broken();
      absl::StrAppend(&text, "streams_broken ", broken, "\n");
      for (auto& a : agents) text += a->ReportLine();
      if (!report.empty()) {
        const std::string tmp = report + ".tmp";
        std::ofstream(tmp) << text;
        rename(tmp.c_str(), report.c_str());
      }
      std::cerr << "fleet-sim-agents: every server is READY\n";
      return;
    }
  });

  // Broken streams: every break_ms, the next tenth of the agents (round-robin).
  std::thread breaker([&] {
    if (break_ms <= 0) return;
    size_t next = 0;
    const size_t per_round = std::max<size_t>(1, agents.size() / 10);
    while (!stop.load()) {
      absl::SleepFor(absl::Milliseconds(break_ms));
      if (sim.Done()) break;
      for (size_t i = 0; i < per_round; ++i) agents[(next + i) % agents.size()]->BreakStreams();
      next = (next + per_round) % agents.size();
    }
  });

  int sig = 0;
  sigwait(&stop_signals, &sig);
  stop = true;
  breaker.join();
  sim.Stop();
  generator.join();
  reporter.join();
  for (auto& s : servers) s->Shutdown(std::chrono::system_clock::now());
  servers.clear();
  return 0;
}

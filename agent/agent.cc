// Agent's methods (agent.h): the event loop and its timers, launches and their waits for a free
// GPU, re-adoption after an agent restart, stops, status, toolchain probes and actions, and the
// event log (stored in agent.db, or held in memory while the store fails). One server attempt's own
// life (its process, log, timers and events) is Agent::ServerRun, in server_run.cc.
#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/agent_internal.h"
#include "agent/env_files.h"
#include "agent/log_follower.h"
#include "agent/message_budget.h"
#include "agent/proc.h"
#include "agent/server_run.h"
#include "common/base/errno_status.h"
#include "common/base/proto_time.h"
#include "common/base/version.h"
#include "common/config/server_gpus.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis_class.h"
#include "common/diagnosis/diagnosis_proto.h"
#include "common/log/log.h"
#include "common/state/states.h"

namespace fleet::agent {
namespace {

using fleet::v1::AgentEvent;
using fleet::v1::ServerSpec;
using internal::EffectiveSpec;
using internal::FillGpuRequest;
using internal::LogGpuCheck;

spdlog::logger& Log() { return log::Get(log::Component::kAgent); }

spdlog::logger& StoreLog() { return log::Get(log::Component::kStore); }

}  // namespace

Agent::Agent(AgentOptions options, Dependencies deps) : options_(std::move(options)), deps_(deps) {}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options, Dependencies deps) {
  std::unique_ptr<Agent> agent(new Agent(std::move(options), deps));
  if (absl::Status s = agent->Init(); !s.ok()) return s;
  return agent;
}

absl::Status Agent::Init() {
  matcher_ = &diagnosis::SignatureMatcher::Builtin();
  probe_ = std::make_unique<ToolchainProbe>(deps_.runner);
  actions_ = std::make_unique<ActionRunner>(deps_.runner);
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return ErrnoToStatus(errno, "agent: epoll_create1");
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return ErrnoToStatus(errno, "agent: eventfd");
  auto store = AgentStore::Open(options_.state_dir, options_.event_retention, options_.boot_id_path,
                                options_.db_vfs);
  if (!store.ok()) return store.status();
  // The agent's mark in its servers' environment (gpu_guard.h): its state dir, resolved, and
  // its root directory (device:inode), which tells apart two containers that see one /proc
  // (chroot containers of one simulated host, fleets side by side) with the same state dir path.
  char resolved[PATH_MAX];
  if (realpath(options_.state_dir.c_str(), resolved) == nullptr) {
    return ErrnoToStatus(errno, absl::StrCat("agent: realpath ", options_.state_dir));
  }
  struct stat root {};
  if (stat("/", &root) != 0) return ErrnoToStatus(errno, "agent: stat /");
  mark_ = absl::StrCat(resolved, "@", root.st_dev, ":", root.st_ino);
  if (deps_.gpu_guard != nullptr) {
    deps_.gpu_guard->SetListener([this](const GpuRequest& r, const GpuCheck& c,
                                        GpuGuard::Verdict v) { OnGpuCheck(r, c, v); });
  }
  {
    absl::MutexLock lock(&mu_);
    store_ = *std::move(store);
    last_sequence_ = store_->last_sequence();
    WatchFd(wake_.get(), Watch::kWake, -1);
    auto records = store_->Servers();
    if (!records.ok()) return records.status();
    for (const fleet::v1::ServerRecord& r : *records) Readopt(r);
    auto terms = store_->FenceTerms();
    if (!terms.ok()) return terms.status();
    fence_terms_ = *std::move(terms);
  }
  NotifySubscribers();
  readiness_thread_ = std::thread([this] { ReadinessLoop(); });
  return absl::OkStatus();
}

Agent::~Agent() {
  // No check result reaches the agent after this (a call in flight is waited for).
  if (deps_.gpu_guard != nullptr) deps_.gpu_guard->SetListener(nullptr);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const auto& [gpu, wait] : gpu_waits_) {
      deps_.gpu_guard->Cancel(gpu, wait.request.attempt_id());
    }
  }
  Wake();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (readiness_thread_.joinable()) readiness_thread_.join();
}

void Agent::Readopt(const fleet::v1::ServerRecord& stored) {
  const absl::Time now = deps_.clock->Now();
  fleet::v1::ServerRecord record = stored;
  if (record.has_launching()) {
    if (AdoptUnrecordedLaunch(record.launching())) return;
    // Never started: the record is what it was before (the daemon's repeat launches it).
    const int32_t gpu = record.launching().spec().server().gpu();
    record.clear_launching();
    const absl::Status s =
        record.attempt_id().empty() ? store_->DeleteServer(gpu) : store_->PutServer(gpu, record);
    if (!s.ok()) StoreLog().error("record: {}", s);
    if (record.attempt_id().empty()) return;
  }
  auto run = std::make_unique<ServerRun>(this, record.spec(), record.attempt_id(),
                                         record.attempt_number());
  const int32_t gpu = record.spec().server().gpu();
  if (record.has_exit()) {
    run->Restored(record);
    servers_[gpu] = std::move(run);
    return;
  }
  if (record.pid() == 0 && deps_.gpu_guard != nullptr) {
    // It waited for its GPU when the agent stopped: it waits again (never launched, nothing to
    // adopt; the previous server's identity went with the record it replaced).
    fleet::v1::LaunchRequest request;
    request.set_attempt_id(record.attempt_id());
    request.set_attempt_number(record.attempt_number());
    *request.mutable_spec() = record.spec();
    WaitForGpu(request, /*previous_attempt=*/0, PreviousServer(), nullptr);
    return;
  }
  absl::StatusOr<UniqueFd> pidfd = OpenPidfd(record.pid(), record.start_ticks());
  if (pidfd.ok()) {
    run->Adopted(record, *std::move(pidfd), now);
    // Re-read the attempt's log from its start to know its phase and diagnosis again, silently;
    // then say once where it is.
    run->StartFollowing(/*replay=*/true).IgnoreError();
    run->AnnounceAdopted();
  } else {
    // It died while the agent was away: its log tells why.
    run->Adopted(record, UniqueFd(), now);
    run->StartFollowing(/*replay=*/true).IgnoreError();
    run->Exited(now, /*status_known=*/false);
  }
  ServerRun* raw = run.get();
  servers_[gpu] = std::move(run);
  Persist(*raw);
}

bool Agent::AdoptUnrecordedLaunch(const fleet::v1::LaunchIntent& intent) {
  const ServerSpec& spec = intent.spec();
  const int32_t gpu = spec.server().gpu();
  for (const GpuProcess& p : FindMarkedProcesses(
           options_.proc_root, mark_, ServerMark(spec, options_), geteuid(), intent.attempt_id())) {
    if (p.session != p.pid) continue;  // a child of the server: the leader is the server
    absl::StatusOr<UniqueFd> pidfd = OpenPidfd(p.pid, p.start_ticks);
    if (!pidfd.ok()) continue;
    const absl::Time now = deps_.clock->Now();
    fleet::v1::ServerRecord record;
    *record.mutable_spec() = spec;
    record.set_attempt_id(intent.attempt_id());
    record.set_attempt_number(intent.attempt_number());
    record.set_pid(p.pid);
    record.set_start_ticks(p.start_ticks);
    *record.mutable_started_at() = ToProtoTime(now);
    record.set_state(std::string(StateName(fleet::v1::SERVER_STATE_STARTING)));
    auto run =
        std::make_unique<ServerRun>(this, spec, intent.attempt_id(), intent.attempt_number());
    run->Adopted(record, *std::move(pidfd), now);
    Log().warn(
        "{} its server (pid {}) started before the agent went away and was never recorded: "
        "adopted",
        log::LogFields{ServerMark(spec, options_), intent.attempt_id()}, p.pid);
    // The launch's own event, which the agent died before storing; then where the server is.
    AgentEvent e;
    *e.mutable_at() = ToProtoTime(now);
    *e.mutable_server() = spec.server();
    e.set_attempt_id(intent.attempt_id());
    SetServerState(fleet::v1::SERVER_STATE_STARTING, e.mutable_phase());
    Emit(std::move(e));
    run->StartFollowing(/*replay=*/true).IgnoreError();
    run->AnnounceAdopted();
    ServerRun* raw = run.get();
    Install(gpu, std::move(run));
    Persist(*raw);
    return true;
  }
  return false;
}

void Agent::Start() {
  loop_thread_ = std::thread([this] {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      RunOnce(absl::Seconds(60));
    }
  });
}

void Agent::RunOnce(absl::Duration timeout) {
  // How long to wait: until the next timer, at most `timeout`.
  absl::Duration wait = timeout;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = deps_.clock->Now();
    absl::Time next = now + timeout;
    for (auto& [gpu, run] : servers_) next = std::min(next, run->Tick(now));
    for (auto& run : draining_) next = std::min(next, run->Tick(now));
    if (Degraded()) {
      if (now >= next_store_retry_) RetryStore(now);
      if (Degraded()) next = std::min(next, next_store_retry_);
    }
    std::erase_if(draining_, [](const std::unique_ptr<ServerRun>& r) { return r->drained(); });
    wait = std::max(absl::ZeroDuration(), next - now);
    if (!probe_outcomes_.empty()) wait = absl::ZeroDuration();
  }
  NotifySubscribers();
  epoll_event events[32];
  const int timeout_ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1))), 60000));
  int n = epoll_wait(epoll_.get(), events, 32, timeout_ms);
  if (n < 0) n = 0;  // EINTR: handle timers only
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = deps_.clock->Now();
    for (int i = 0; i < n; ++i) {
      auto it = watches_.find(events[i].data.fd);
      if (it == watches_.end()) continue;
      const Watch watch = it->second;
      if (watch.kind == Watch::kWake) {
        uint64_t value;
        while (read(wake_.get(), &value, sizeof(value)) > 0) {
        }
        continue;
      }
      auto run = servers_.find(watch.gpu);
      if (run == servers_.end()) continue;
      if (watch.kind == Watch::kLog) run->second->PollLog();
      if (watch.kind == Watch::kExit) {
        run->second->Exited(now, /*status_known=*/true);
        Persist(*run->second);
      }
    }
    while (!probe_outcomes_.empty()) {
      ProbeOutcome o = std::move(probe_outcomes_.front());
      probe_outcomes_.pop_front();
      auto run = servers_.find(o.gpu);
      if (run == servers_.end() || run->second->attempt_id() != o.attempt_id) continue;
      const bool was_ready = run->second->ready();
      run->second->ProbeDone(o.result, now);
      if (!was_ready && run->second->ready()) Persist(*run->second);
    }
    HandleTimers(now);
  }
  NotifySubscribers();
}

void Agent::HandleTimers(absl::Time now) {
  for (auto& [gpu, run] : servers_) {
    run->Tick(now);
    // Events are hints: look at each live log now and then anyway.
    if (run->alive()) run->PollLog();
  }
}

absl::Status Agent::AdmitFence(const fleet::v1::Fence& fence) {
  absl::MutexLock lock(&mu_);
  auto it = fence_terms_.find(fence.fleet_id());
  const int64_t highest = it == fence_terms_.end() ? 0 : it->second;
  if (fence.term() < highest) {
    log::Get(log::Component::kAgent)
        .warn("fenced: a request of fleet '{}' at term {} refused, its leader is at term {}",
              fence.fleet_id(), fence.term(), highest);
    return absl::FailedPreconditionError(absl::StrCat(
        "fenced: term ", fence.term(), " of fleet '", fence.fleet_id(), "' is older than term ",
        highest, " this agent has seen: another fleetd leads"));
  }
  if (fence.term() > highest) {
    // Kept before anything is done for it: after a restart, the old leader is still refused.
    if (store_ != nullptr) {
      if (absl::Status s = store_->PutFenceTerm(fence.fleet_id(), fence.term()); !s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("fence: cannot keep term ", fence.term(), ": ", s.message()));
      }
    }
    fence_terms_[fence.fleet_id()] = fence.term();
  }
  return absl::OkStatus();
}

absl::StatusOr<fleet::v1::LaunchResponse> Agent::Launch(const fleet::v1::LaunchRequest& request) {
  const ServerSpec& spec = request.spec();
  if (request.attempt_id().empty()) {
    return absl::InvalidArgumentError("launch: attempt_id is required (the daemon allocates it)");
  }
  if (spec.argv().empty()) return absl::InvalidArgumentError("launch: spec.argv is empty");
  if (spec.log_path().empty() || spec.log_path()[0] != '/') {
    return absl::InvalidArgumentError("launch: spec.log_path must be an absolute path");
  }
  if (spec.server().gpu() < 0) return absl::InvalidArgumentError("launch: spec.server.gpu < 0");
  if (!spec.gpus().empty()) {
    if (spec.gpus(0) != spec.server().gpu()) {
      return absl::InvalidArgumentError("launch: spec.gpus must start with spec.server.gpu");
    }
    std::set<int32_t> seen;
    for (int32_t g : spec.gpus()) {
      if (g < 0 || !seen.insert(g).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("launch: spec.gpus holds ", g < 0 ? "a negative" : "a repeated", " GPU ",
                         g, " (", absl::StrJoin(spec.gpus(), ","), ")"));
      }
    }
  }
  const int32_t gpu = spec.server().gpu();
  fleet::v1::LaunchResponse response;
  // Who may use the GPU is decided under the lock, twice when it is checked: before the check
  // (without the lock: it runs nvidia-smi and may reap leftovers) and after it.
  std::optional<GpuCheck> check;
  if (deps_.gpu_guard != nullptr) {
    GpuRequest gpu_request;
    {
      absl::MutexLock lock(&mu_);
      int64_t previous_attempt = 0;
      absl::Status refused = Admit(request, &response, &previous_attempt, &gpu_request.previous);
      if (!refused.ok()) return refused;
      if (response.already_running()) return response;
    }
    FillGpuRequest(request, mark_, options_, &gpu_request);
    check = deps_.gpu_guard->Check(gpu_request);
    LogGpuCheck(gpu_request, *check, /*busy=*/!check->free);
  }
  {
    absl::MutexLock lock(&mu_);
    int64_t previous_attempt = 0;
    PreviousServer previous;
    absl::Status refused = Admit(request, &response, &previous_attempt, &previous);
    if (!refused.ok()) return refused;
    if (response.already_running()) return response;
    if (check.has_value() && !check->free) {
      // Busy: the attempt waits for its GPU, checked again off this call and off the loop.
      WaitForGpu(request, previous_attempt, previous, &*check);
      *response.mutable_status() = StatusOf(*servers_[gpu]);
    } else {
      absl::StatusOr<fleet::v1::ServerStatus> started = StartAttempt(request, previous_attempt);
      if (!started.ok()) return started.status();
      *response.mutable_status() = *std::move(started);
    }
  }
  NotifySubscribers();
  Wake();
  return response;
}

absl::Status Agent::Admit(const fleet::v1::LaunchRequest& request,
                          fleet::v1::LaunchResponse* response, int64_t* previous_attempt,
                          PreviousServer* previous) {
  const int32_t gpu = request.spec().server().gpu();
  auto existing = servers_.find(gpu);
  if (existing == servers_.end()) return absl::OkStatus();
  ServerRun& old = *existing->second;
  if (old.attempt_id() == request.attempt_id()) {
    *response->mutable_status() = StatusOf(old);
    response->set_already_running(true);
    return absl::OkStatus();
  }
  if (old.alive() || old.waiting_for_gpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("launch: gpu ", gpu, old.alive() ? " runs attempt " : " waits for attempt ",
                     old.attempt_id(), "; stop it before launching ", request.attempt_id()));
  }
  *previous_attempt = old.attempt_number();
  // The server that ran there before: its leftovers are the only processes a GPU check kills.
  const fleet::v1::ServerRecord r = old.Record();
  *previous = {static_cast<pid_t>(r.pid()), r.start_ticks()};
  return absl::OkStatus();
}

namespace internal {

// The spec as the agent runs it: CUDA_VISIBLE_DEVICES is the config's GPU indexes (the server's
// GPUs, "0,1" for a tensor-parallel one), and CUDA_DEVICE_ORDER=PCI_BUS_ID makes them nvidia-smi's
// (CUDA's default order puts the fastest GPU first, which differs on a machine with mixed GPUs). A
// spec's own values of either are replaced, and said so: the GPU check, the config and the logs all
// mean this index.
ServerSpec EffectiveSpec(const ServerSpec& spec, const AgentOptions& options,
                         const std::string& request_attempt) {
  ServerSpec effective = spec;
  auto& env = *effective.mutable_env();
  const std::pair<const char*, std::string> pinned[] = {
      {"CUDA_VISIBLE_DEVICES", absl::StrJoin(config::ServerGpus(spec), ",")},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};
  for (const auto& [name, value] : pinned) {
    auto it = env.find(name);
    if (it != env.end() && it->second != value) {
      Log().warn("{} the spec's {}={} replaced by {}",
                 log::LogFields{ServerMark(spec, options), request_attempt}, name, it->second,
                 value);
    }
    env[name] = value;
  }
  if (effective.server().host().empty()) effective.mutable_server()->set_host(options.host);
  if (effective.server().container().empty()) {
    effective.mutable_server()->set_container(options.container);
  }
  return effective;
}

}  // namespace internal

absl::StatusOr<fleet::v1::ServerStatus> Agent::StartAttempt(const fleet::v1::LaunchRequest& request,
                                                            int64_t previous_attempt) {
  const ServerSpec& spec = request.spec();
  const int32_t gpu = spec.server().gpu();
  // The values given by file are read now, each launch (a rotated token is picked up); only
  // their paths are recorded.
  absl::StatusOr<std::map<std::string, std::string>> from_files = ReadEnvFiles(spec);
  if (!from_files.ok()) {
    return absl::Status(from_files.status().code(),
                        absl::StrCat("launch: gpu ", gpu, ": ", from_files.status().message()));
  }
  const ServerSpec effective = EffectiveSpec(spec, options_, request.attempt_id());
  // Written ahead of the spawn (agent_state.proto's LaunchIntent): an agent killed between the
  // spawn and the record below adopts the process at start. No launch without it.
  {
    fleet::v1::ServerRecord ahead;
    auto current = servers_.find(gpu);
    if (current != servers_.end()) ahead = current->second->Record();
    fleet::v1::LaunchIntent* intent = ahead.mutable_launching();
    intent->set_attempt_id(request.attempt_id());
    intent->set_attempt_number(request.attempt_number());
    *intent->mutable_spec() = effective;
    if (absl::Status s = store_->PutServer(gpu, ahead); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("launch: gpu ", gpu, ": the launch cannot be recorded: ", s.message()));
    }
  }
  RotateLog(spec.log_path(), previous_attempt);
  ServerCommand command;
  command.argv.assign(spec.argv().begin(), spec.argv().end());
  command.env = {effective.env().begin(), effective.env().end()};
  for (auto& [name, value] : *from_files) {
    // The GPU pins of EffectiveSpec win over a file as they win over the spec's env.
    if (name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER") continue;
    command.env[name] = std::move(value);
  }
  // The agent's marks (gpu_guard.h), last: a server it loses the record of is still known as its.
  command.env[kMarkAgent] = mark_;
  command.env[kMarkServer] = ServerMark(spec, options_);
  command.env[kMarkAttempt] = request.attempt_id();
  command.cwd = spec.workdir();
  command.log_path = spec.log_path();
  absl::StatusOr<ServerProcess> process = deps_.launcher->Launch(command);
  if (!process.ok()) {
    // Nothing started: the record goes back to the server that ran before.
    auto current = servers_.find(gpu);
    if (current != servers_.end()) {
      Persist(*current->second);
    } else if (absl::Status s = store_->DeleteServer(gpu); !s.ok()) {
      StoreLog().error("record: {}", s);
    }
    return process.status();
  }
  auto run =
      std::make_unique<ServerRun>(this, effective, request.attempt_id(), request.attempt_number());
  run->Launched(*std::move(process), deps_.clock->Now());
  ServerRun* raw = run.get();
  Install(gpu, std::move(run));
  Persist(*raw);
  AgentEvent e;
  *e.mutable_at() = ToProtoTime(deps_.clock->Now());
  *e.mutable_server() = effective.server();
  e.set_attempt_id(request.attempt_id());
  SetServerState(fleet::v1::SERVER_STATE_STARTING, e.mutable_phase());
  Emit(std::move(e));
  absl::Status follow = raw->StartFollowing(/*replay=*/false);
  if (!follow.ok()) {
    // The server runs; its log is not readable yet. The periodic look will pick it up.
    raw->PollLog();
  }
  return StatusOf(*raw);
}

void Agent::Install(int32_t gpu, std::unique_ptr<ServerRun> run) {
  auto existing = servers_.find(gpu);
  // The server it replaces may still be dying (its group killed, its leader kept as a zombie
  // until the members are reaped): it is drained aside, ticked until nothing of it is left.
  if (existing != servers_.end() && existing->second != nullptr && !existing->second->drained()) {
    draining_.push_back(std::move(existing->second));
  }
  servers_[gpu] = std::move(run);
}

absl::StatusOr<fleet::v1::StopResponse> Agent::Stop(const fleet::v1::StopRequest& request) {
  fleet::v1::StopResponse response;
  {
    absl::MutexLock lock(&mu_);
    auto it = servers_.find(request.server().gpu());
    if (it == servers_.end()) {
      return absl::NotFoundError(absl::StrCat("stop: no server on gpu ", request.server().gpu()));
    }
    it->second->RequestStop(deps_.clock->Now(),
                            ProtoDurationOr(request.grace(), options_.stop_grace));
    if (auto wait = gpu_waits_.find(request.server().gpu()); wait != gpu_waits_.end()) {
      deps_.gpu_guard->Cancel(wait->first, wait->second.request.attempt_id());
      gpu_waits_.erase(wait);
    }
    Persist(*it->second);
    *response.mutable_status() = StatusOf(*it->second);
  }
  NotifySubscribers();
  Wake();
  return response;
}

fleet::v1::StatusResponse Agent::Status() {
  absl::MutexLock lock(&mu_);
  fleet::v1::StatusResponse response;
  response.set_incarnation(store_->incarnation());
  response.set_sequence(last_sequence_);
  response.set_agent_version(kVersion);
  for (const auto& [gpu, run] : servers_) *response.add_servers() = StatusOf(*run);
  // The snapshot's diagnoses share one budget: eight failed servers with the longest evidence
  // must still make one message (the events carry the fuller evidence).
  int with_diagnosis = 0;
  for (const auto& st : response.servers()) with_diagnosis += st.has_diagnosis();
  if (with_diagnosis > 0) {
    const size_t each = std::max(kSnapshotDiagnosisBytes / static_cast<size_t>(with_diagnosis),
                                 kMinSnapshotDiagnosisBytes);
    int64_t omitted = 0;
    for (auto& st : *response.mutable_servers()) {
      if (st.has_diagnosis()) omitted += FitDiagnosis(st.mutable_diagnosis(), each);
    }
    response.set_evidence_lines_omitted(static_cast<uint64_t>(omitted));
  }
  if (Degraded()) {
    response.set_degraded(true);
    response.set_degraded_reason(absl::StrCat("agent.db: ", store_error_));
  }
  response.set_events_unstored(unstored_.size());
  response.set_events_dropped(events_dropped_);
  return response;
}

fleet::v1::ServerStatus Agent::StatusOf(const ServerRun& run) const {
  fleet::v1::ServerStatus status = run.Status();
  if (status.has_diagnosis()) FitDiagnosis(status.mutable_diagnosis(), kEventDiagnosisBytes);
  return status;
}

namespace {

ProbeTarget TargetOf(const ServerSpec& spec, const AgentOptions& options) {
  ProbeTarget t;
  for (int gpu : config::ServerGpus(spec)) t.gpus.push_back(gpu);
  t.dev_root = options.dev_root;
  t.test_compile = !spec.skip_test_compile();
  t.argv.assign(spec.argv().begin(), spec.argv().end());
  t.env = ServerEnv(spec);
  t.workdir = spec.workdir();
  t.nvidia_smi.assign(spec.tools().nvidia_smi().begin(), spec.tools().nvidia_smi().end());
  t.venv = spec.tools().venv();
  t.jit_cache_roots.assign(spec.tools().jit_cache_roots().begin(),
                           spec.tools().jit_cache_roots().end());
  t.search_path.assign(spec.tools().search_path().begin(), spec.tools().search_path().end());
  return t;
}

}  // namespace

fleet::v1::ToolchainSnapshot Agent::Probe(const ServerSpec& spec) {
  absl::MutexLock tools(&tool_mu_);
  fleet::v1::ToolchainSnapshot snapshot = probe_->Probe(TargetOf(spec, options_));
  // The server cannot start without its GPU device nodes; the launch is not held back (the
  // driver creates some on first use outside a container), so the agent's log says it here.
  if (!snapshot.device_node_problems().empty()) {
    Log().warn(
        "{} GPU device nodes: {} (an LXC container's config must pass them in: "
        "docs/config.md)",
        log::LogFields{ServerMark(spec, options_)},
        absl::StrJoin(snapshot.device_node_problems(), "; "));
  }
  return snapshot;
}

fleet::v1::ApplyResponse Agent::Apply(const fleet::v1::ApplyRequest& request) {
  absl::MutexLock tools(&tool_mu_);
  const ServerSpec& spec = request.spec();
  ActionContext context;
  context.env = ServerEnv(spec);
  context.pip.assign(spec.tools().pip().begin(), spec.tools().pip().end());
  context.venv = spec.tools().venv();
  context.pip_options.assign(spec.tools().pip_options().begin(), spec.tools().pip_options().end());
  context.apt_get.assign(spec.tools().apt_get().begin(), spec.tools().apt_get().end());
  context.jit_cache_roots.assign(spec.tools().jit_cache_roots().begin(),
                                 spec.tools().jit_cache_roots().end());
  for (const std::string& r : options_.jit_cache_roots) context.jit_cache_roots.push_back(r);
  context.toolkit_roots.assign(spec.tools().toolkit_roots().begin(),
                               spec.tools().toolkit_roots().end());
  for (const std::string& r : options_.toolkit_roots) context.toolkit_roots.push_back(r);
  fleet::v1::ApplyResponse response;
  const bool has_pip = std::any_of(request.actions().begin(), request.actions().end(),
                                   [](const fleet::v1::Action& a) { return a.has_pip_install(); });
  if (request.save_package_set() && has_pip) {
    // The package set before the change, for a rollback: `pip freeze` through the same pip.
    Command freeze;
    freeze.argv = context.pip.empty()
                      ? std::vector<std::string>{context.venv + "/bin/python", "-m", "pip"}
                      : context.pip;
    freeze.argv.push_back("freeze");
    freeze.env = context.env;
    absl::StatusOr<CommandResult> r = deps_.runner->Run(freeze);
    if (r.ok() && r->ok()) {
      for (absl::string_view line : absl::StrSplit(r->output, '\n', absl::SkipEmpty())) {
        const size_t eq = line.find("==");
        if (eq == absl::string_view::npos) continue;
        auto* p = response.add_saved_package_set();
        p->set_name(std::string(line.substr(0, eq)));
        p->set_version(std::string(line.substr(eq + 2)));
      }
    }
  }
  for (const fleet::v1::Action& action : request.actions()) {
    fleet::v1::ActionResult result = actions_->Apply(action, context);
    const bool ok = result.ok();
    *response.add_results() = std::move(result);
    if (!ok) break;  // later actions assumed the earlier ones
  }
  *response.mutable_after() = probe_->Probe(TargetOf(spec, options_));
  return response;
}

std::vector<AgentEvent> Agent::EventsAfter(const std::string& incarnation, uint64_t after,
                                           size_t limit) {
  absl::MutexLock lock(&mu_);
  std::vector<AgentEvent> out;
  const bool foreign = incarnation != store_->incarnation();
  bool lost = !foreign && (after + 1 < store_->first_sequence() || after > last_sequence_);
  if (!foreign && !lost) {
    if (after < store_->last_sequence()) {
      auto events = store_->EventsAfter(after, limit);
      if (!events.ok()) return out;  // read again at the next call
      out = *std::move(events);
    }
    // Then what only memory holds (numbered after everything stored).
    for (const AgentEvent& e : unstored_) {
      if (out.size() >= limit) break;
      if (e.sequence() > after) out.push_back(e);
    }
    // Numbers run on without a hole, or the events of the hole were lost (dropped from memory
    // while the store failed): a position just before a hole is resynchronised, and a batch
    // stops at one.
    size_t contiguous = 0;
    while (contiguous < out.size() && out[contiguous].sequence() == after + 1 + contiguous) {
      ++contiguous;
    }
    if (contiguous == 0 && (!out.empty() || after < last_sequence_)) {
      lost = true;
    } else {
      out.resize(contiguous);
    }
  }
  if (foreign || lost) {
    out.clear();
    AgentEvent resync;
    resync.set_incarnation(store_->incarnation());
    resync.set_sequence(last_sequence_);
    *resync.mutable_at() = ToProtoTime(deps_.clock->Now());
    resync.mutable_resync()->set_previous_incarnation(incarnation);
    resync.mutable_resync()->set_first_sequence(store_->first_sequence());
    out.push_back(std::move(resync));
  }
  return out;
}

void Agent::Subscribe(EventSubscriber* subscriber) {
  absl::MutexLock lock(&mu_);
  subscribers_.insert(subscriber);
}

void Agent::Unsubscribe(EventSubscriber* subscriber) {
  {
    absl::MutexLock lock(&mu_);
    subscribers_.erase(subscriber);
  }
  // A notification that copied the list before the erase may still be calling it: wait for it.
  absl::MutexLock notifying(&notify_mu_);
}

std::string Agent::LogPath(int32_t gpu, int64_t attempt_number) {
  absl::MutexLock lock(&mu_);
  auto it = servers_.find(gpu);
  if (it == servers_.end()) return "";
  const ServerRun& run = *it->second;
  const std::string& live = run.spec().log_path();
  if (attempt_number == 0 || attempt_number == run.attempt_number()) return live;
  const std::string rotated = absl::StrCat(live, ".", attempt_number);
  return access(rotated.c_str(), R_OK) == 0 ? rotated : "";
}

std::string Agent::incarnation() const {
  absl::MutexLock lock(&mu_);
  return store_->incarnation();
}

uint64_t Agent::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return last_sequence_;
}

void Agent::Emit(AgentEvent event) {
  if (event.server().host().empty()) event.mutable_server()->set_host(options_.host);
  if (event.server().container().empty()) event.mutable_server()->set_container(options_.container);
  // Each event bounded: one message, whatever the log held.
  if (event.has_diagnosis()) {
    FitDiagnosis(event.mutable_diagnosis()->mutable_diagnosis(), kEventDiagnosisBytes);
  }
  if (event.has_stalled()) {
    FitDiagnosis(event.mutable_stalled()->mutable_diagnosis(), kEventDiagnosisBytes);
  }
  event.set_incarnation(store_->incarnation());
  event.set_sequence(++last_sequence_);
  events_pending_ = true;
  const absl::Time now = deps_.clock->Now();
  if (unstored_.empty()) {
    absl::Status s = store_->Append(&event);
    // An append whose pruning failed stored the event all the same.
    if (s.ok() || store_->last_sequence() >= event.sequence()) return;
    StoreFailed(s, now);
  }
  // Kept, in order, until the store takes it; the stream serves it from memory meanwhile.
  unstored_bytes_ += event.ByteSizeLong();
  unstored_.push_back(std::move(event));
  while (unstored_.size() > options_.max_unstored_events ||
         (unstored_bytes_ > options_.max_unstored_bytes && unstored_.size() > 1)) {
    unstored_bytes_ -= unstored_.front().ByteSizeLong();
    unstored_.pop_front();
    if (events_dropped_++ == 0) {
      StoreLog().warn(
          "event log: over {} events or {} bytes in memory; the oldest are dropped (a stream "
          "that missed them resynchronises)",
          options_.max_unstored_events, options_.max_unstored_bytes);
    }
  }
  if (now >= next_store_retry_) RetryStore(now);
}

void Agent::StoreFailed(const absl::Status& status, absl::Time now) {
  if (store_error_.empty()) {
    StoreLog().error("event log: {}; events kept in memory and retried", status);
  }
  store_error_ = std::string(status.message());
  next_store_retry_ = now + options_.store_retry_interval;
}

void Agent::RetryStore(absl::Time now) {
  if (unstored_.empty() && unstored_records_.empty()) return;
  while (!unstored_.empty()) {
    AgentEvent& e = unstored_.front();
    absl::Status s = store_->Append(&e);
    if (!s.ok() && store_->last_sequence() < e.sequence()) {
      StoreFailed(s, now);
      return;
    }
    unstored_bytes_ -= e.ByteSizeLong();
    unstored_.pop_front();
  }
  for (auto it = unstored_records_.begin(); it != unstored_records_.end();) {
    auto run = servers_.find(*it);
    if (run != servers_.end()) {
      absl::Status s = store_->PutServer(run->first, run->second->Record());
      if (!s.ok()) {
        StoreFailed(s, now);
        return;
      }
    }
    it = unstored_records_.erase(it);
  }
  if (!store_error_.empty()) {
    StoreLog().info("event log: stored again (up to sequence {})", last_sequence_);
  }
  store_error_.clear();
}

bool Agent::Degraded() const { return !unstored_.empty() || !unstored_records_.empty(); }

void Agent::NotifySubscribers() {
  absl::MutexLock notifying(&notify_mu_);
  std::vector<EventSubscriber*> to_notify;
  {
    absl::MutexLock lock(&mu_);
    if (!events_pending_) return;
    events_pending_ = false;
    to_notify.assign(subscribers_.begin(), subscribers_.end());
  }
  for (EventSubscriber* s : to_notify) s->OnEventsAvailable();
}

void Agent::Persist(const ServerRun& run) {
  absl::Status s = store_->PutServer(run.gpu(), run.Record());
  if (s.ok()) {
    unstored_records_.erase(run.gpu());
    return;
  }
  StoreLog().error("{} record: {}",
                   log::LogFields{ServerMark(run.spec(), options_), run.attempt_id()}, s);
  unstored_records_.insert(run.gpu());
  StoreFailed(s, deps_.clock->Now());
}

void Agent::RotateLog(const std::string& log_path, int64_t previous_attempt) {
  struct stat st;
  if (stat(log_path.c_str(), &st) != 0 || st.st_size == 0) return;
  // The previous attempt's log is kept as LOG.<attempt>; a log of unknown origin as
  // LOG.prev-<mtime>. Never overwritten: an existing name gets a suffix.
  std::string target = previous_attempt > 0 ? absl::StrCat(log_path, ".", previous_attempt)
                                            : absl::StrCat(log_path, ".prev-", st.st_mtime);
  for (int n = 1; access(target.c_str(), F_OK) == 0; ++n) {
    target = absl::StrCat(
        log_path, ".",
        previous_attempt > 0 ? absl::StrCat(previous_attempt) : absl::StrCat("prev-", st.st_mtime),
        "-", n);
  }
  if (rename(log_path.c_str(), target.c_str()) != 0) return;
  // Bounded retention: the newest `log_retention` rotated logs of this path stay.
  const std::filesystem::path p(log_path);
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> rotated;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = p.filename().string() + ".";
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
      rotated.emplace_back(entry.last_write_time(ec), entry.path());
    }
  }
  if (static_cast<int>(rotated.size()) <= options_.log_retention) return;
  std::sort(rotated.begin(), rotated.end());
  for (size_t i = 0; i + options_.log_retention < rotated.size(); ++i) {
    std::filesystem::remove(rotated[i].second, ec);
  }
}

void Agent::WatchFd(int fd, Watch::Kind kind, int32_t gpu) {
  if (fd < 0) return;
  watches_[fd] = Watch{kind, gpu};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
    epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
}

void Agent::UnwatchFd(int fd) {
  if (fd < 0) return;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watches_.erase(fd);
}

void Agent::Wake() {
  const uint64_t one = 1;
  ssize_t n = write(wake_.get(), &one, sizeof(one));
  static_cast<void>(n);
}

void Agent::RequestProbe(ProbeJob job) { probe_jobs_.push_back(std::move(job)); }

void Agent::ReadinessLoop() {
  while (true) {
    ProbeJob job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Agent* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu_) {
            return a->stopping_ || !a->probe_jobs_.empty();
          },
          this));
      if (stopping_) return;
      job = std::move(probe_jobs_.front());
      probe_jobs_.pop_front();
    }
    ReadinessResult result = deps_.prober->Check(job.check);
    {
      absl::MutexLock lock(&mu_);
      probe_outcomes_.push_back({job.gpu, job.attempt_id, std::move(result)});
    }
    Wake();
  }
}

}  // namespace fleet::agent

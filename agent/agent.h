// Agent: runs one inference server per GPU inside its container, follows each server's log,
// knows its phase, tells why a start failed, notices stalls, and reports all of it as a
// resumable event stream. It starts servers only when asked (Launch, with the attempt id the
// daemon allocated; idempotent on it) and never relaunches on its own: the daemon decides
// (docs/design.md, "Attempt ownership"). Standalone mode (main.cc) plays the daemon's part for a
// local spec.
//
// Servers are the agent's children in sessions of their own, with their logs in files, so they
// outlive an agent restart; the agent records what it runs (AgentStore) and a restarted agent
// re-adopts live servers (pid + start time) instead of relaunching them, and reports the ones that
// died while it was away, with their log's diagnosis. A process or group is signalled only when
// its leader's identity (pid + start time) is verified at that moment.
//
// When agent.db fails (a full disk) no event is lost silently: events keep their numbers, are
// served from memory (bounded) and stored once the store takes them again, and Status says the
// agent is degraded. Events lost to the bound leave a gap that a stream position in it turns
// into a Resync, so the daemon takes a snapshot and records the gap.
//
// Threads: one event loop (Start(), or RunOnce() from tests) waits on each log's inotify
// descriptor, each server's pidfd and a wake-up eventfd, and runs the timers (readiness probes,
// CPU sampling, stall and deadline checks, stop escalation). A readiness thread makes the blocking
// HTTP probes. The public methods are thread-safe and may be called from gRPC threads; Probe()
// and Apply() block while tools run (call them off the event loop). Everything mutable is
// guarded by mu_.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/action_runner.h"
#include "agent/agent_store.h"
#include "agent/command_runner.h"
#include "agent/event_source.h"
#include "agent/gpu_guard.h"
#include "agent/process_launcher.h"
#include "agent/readiness.h"
#include "agent/toolchain_probe.h"
#include "common/base/clock.h"
#include "common/base/unique_fd.h"
#include "common/diagnosis/signature_matcher.h"
#include "proto/agent.pb.h"

namespace fleet::agent {

struct AgentOptions {
  std::string state_dir;
  // Identity used in events when a spec does not name it.
  std::string host = "local";
  std::string container = "local";
  absl::Duration readiness_interval = absl::Seconds(2);
  absl::Duration progress_sample_interval = absl::Seconds(5);
  absl::Duration default_stall_timeout = absl::Minutes(10);
  absl::Duration default_startup_deadline = absl::Minutes(90);
  absl::Duration stop_grace = absl::Seconds(30);
  // Earlier attempts' logs kept per log path (LOG.<attempt>).
  int log_retention = 10;
  int64_t event_retention = 20000;
  std::string proc_root = "/proc";
  // The container's device dir, where the probe looks for the GPU device nodes a server needs
  // (toolchain_probe.h); empty: not looked for.
  std::string dev_root = "/dev";
  // Action limits (from the config): where ClearJitCache and Symlink may act.
  std::vector<std::string> jit_cache_roots;
  std::vector<std::string> toolkit_roots;
  // While agent.db fails (a full disk), events are numbered and kept in memory, at most this
  // many and this many bytes (the oldest go first: a gap the stream reports as a Resync), and
  // storing them is retried every `store_retry_interval`.
  size_t max_unstored_events = 10000;
  size_t max_unstored_bytes = 64 << 20;
  absl::Duration store_retry_interval = absl::Seconds(1);
  // agent.db's boot id source and SQLite VFS (AgentStore::Open); tests and the fault matrix's
  // power-loss row change them.
  std::string boot_id_path = AgentStore::kBootIdPath;
  std::string db_vfs;
};

class Agent : public EventSource {
 public:
  struct Dependencies {
    Clock* clock;
    ProcessLauncher* launcher;
    ReadinessProber* prober;
    CommandRunner* runner;  // probes and actions
    // Checks that a GPU is free before each launch on it (the launch waits for it, off the
    // loop); null: launches at once, unchecked.
    GpuGuard* gpu_guard = nullptr;
  };

  // Opens the state dir, re-adopts live servers and reports the dead ones. The dependencies must
  // outlive the agent.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options, Dependencies deps);
  // Stops the loop and readiness threads. Servers keep running: they are not the agent's to stop.
  ~Agent() override;

  // Runs the event loop on a thread of its own.
  void Start();
  // One turn of the loop: waits at most `timeout` for a descriptor, then handles every ready one
  // and every timer due. Tests call it directly (with a FakeClock) instead of Start().
  void RunOnce(absl::Duration timeout);

  // Fencing (issue 16): OK when `fence`'s term is at least the highest this agent has seen for
  // its fleet (a higher one is kept in agent.db, synced, before this returns); FailedPrecondition
  // ("fenced") when it is lower: the request comes from a leader that was replaced. The service
  // calls it before Launch, Stop and Apply.
  absl::Status AdmitFence(const fleet::v1::Fence& fence) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::LaunchRequest& request);
  absl::StatusOr<fleet::v1::StopResponse> Stop(const fleet::v1::StopRequest& request);
  fleet::v1::StatusResponse Status();
  fleet::v1::ToolchainSnapshot Probe(const fleet::v1::ServerSpec& spec);
  fleet::v1::ApplyResponse Apply(const fleet::v1::ApplyRequest& request);

  // Events after (incarnation, sequence), at most `limit`. A position from another incarnation,
  // or one the log no longer holds, yields one Resync event first (at the current sequence: the
  // caller takes a Status() snapshot and continues after it).
  std::vector<fleet::v1::AgentEvent> EventsAfter(const std::string& incarnation, uint64_t after,
                                                 size_t limit) override;
  void Subscribe(EventSubscriber* subscriber) override;
  void Unsubscribe(EventSubscriber* subscriber) override ABSL_LOCKS_EXCLUDED(mu_, notify_mu_);

  // The log of `gpu`'s attempt `attempt_number` (0: the current one): the live log path, or the
  // LOG.<attempt> it was rotated to. "" when there is none.
  std::string LogPath(int32_t gpu, int64_t attempt_number);

  std::string incarnation() const;
  uint64_t last_sequence() const;

 private:
  class ServerRun;
  friend class ServerRun;
  struct Watch {
    enum Kind { kWake, kLog, kExit } kind;
    int32_t gpu;
  };
  struct ProbeJob {
    int32_t gpu;
    std::string attempt_id;
    ReadinessCheck check;
  };
  struct ProbeOutcome {
    int32_t gpu;
    std::string attempt_id;
    ReadinessResult result;
  };

  // A launch waiting for its GPU: what to start once the guard says it is free.
  struct GpuWait {
    fleet::v1::LaunchRequest request;
    int64_t previous_attempt = 0;
  };

  Agent(AgentOptions options, Dependencies deps);
  // Starts the attempt's process now (the GPU is free, or unchecked).
  absl::StatusOr<fleet::v1::ServerStatus> StartAttempt(const fleet::v1::LaunchRequest& request,
                                                       int64_t previous_attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts `run` in its GPU's place; the run it replaces is drained aside while its group dies.
  void Install(int32_t gpu, std::unique_ptr<ServerRun> run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `request` may start on its GPU now: an error when another attempt runs or waits
  // there; OK with `response` filled and already_running set when it is this very attempt (a
  // repeat); else OK, with the previous attempt's number and server filled in.
  absl::Status Admit(const fleet::v1::LaunchRequest& request, fleet::v1::LaunchResponse* response,
                     int64_t* previous_attempt, PreviousServer* previous)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds the GPU's place with an attempt that has no process yet (its phase says who holds
  // the GPU, from `first`, the check that found it busy, when there was one), and asks the guard.
  void WaitForGpu(const fleet::v1::LaunchRequest& request, int64_t previous_attempt,
                  PreviousServer previous, const GpuCheck* first)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The guard's answer (on its thread): launch, say who holds the GPU, or give up.
  void OnGpuCheck(const GpuRequest& request, const GpuCheck& check, GpuGuard::Verdict verdict)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Init();
  void Readopt(const fleet::v1::ServerRecord& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A launch written ahead of its spawn and never recorded after it (the agent was killed in
  // between): the process it started, found by its marks (gpu_guard.h), is adopted and its launch
  // recorded. False when there is none: it was never started.
  bool AdoptUnrecordedLaunch(const fleet::v1::LaunchIntent& intent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTimers(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(fleet::v1::AgentEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Persist(const ServerRun& run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores what only memory holds (events, server records), oldest first, while the store takes it.
  void RetryStore(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StoreFailed(const absl::Status& status, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Degraded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RotateLog(const std::string& log_path, int64_t previous_attempt);
  void WatchFd(int fd, Watch::Kind kind, int32_t gpu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnwatchFd(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();
  void NotifySubscribers() ABSL_LOCKS_EXCLUDED(mu_, notify_mu_);
  void ReadinessLoop();
  void RequestProbe(ProbeJob job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  fleet::v1::ServerStatus StatusOf(const ServerRun& run) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const AgentOptions options_;
  // options_.state_dir resolved (set once by Init): the kMarkAgent value of its servers.
  std::string mark_;
  const Dependencies deps_;
  const diagnosis::SignatureMatcher* matcher_ = nullptr;
  UniqueFd epoll_;
  UniqueFd wake_;
  std::unique_ptr<ToolchainProbe> probe_;
  std::unique_ptr<ActionRunner> actions_;

  mutable absl::Mutex mu_;
  std::unique_ptr<AgentStore> store_ ABSL_GUARDED_BY(mu_);
  // The highest leader term seen per fleet id (AdmitFence), as in agent.db.
  std::map<std::string, int64_t> fence_terms_ ABSL_GUARDED_BY(mu_);
  // The last sequence given to an event: the store's last, or an unstored event's.
  uint64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Events numbered but not yet in agent.db, oldest first, with their serialized bytes.
  std::deque<fleet::v1::AgentEvent> unstored_ ABSL_GUARDED_BY(mu_);
  size_t unstored_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t events_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // GPUs whose server record could not be stored.
  std::set<int32_t> unstored_records_ ABSL_GUARDED_BY(mu_);
  std::string store_error_ ABSL_GUARDED_BY(mu_);  // the last failure; "" once all is stored
  absl::Time next_store_retry_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::map<int32_t, std::unique_ptr<ServerRun>> servers_ ABSL_GUARDED_BY(mu_);
  // Replaced attempts whose process group is still being killed and reaped.
  std::vector<std::unique_ptr<ServerRun>> draining_ ABSL_GUARDED_BY(mu_);
  // Watches by descriptor; the epoll data points at the map's nodes, which stay put.
  std::map<int, Watch> watches_ ABSL_GUARDED_BY(mu_);
  std::set<EventSubscriber*> subscribers_ ABSL_GUARDED_BY(mu_);
  // Held while subscribers are told (outside mu_): Unsubscribe waits for it, so a subscriber
  // that unsubscribed (a finished stream, deleted right after) is never called again.
  absl::Mutex notify_mu_;
  bool events_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<ProbeJob> probe_jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<ProbeOutcome> probe_outcomes_ ABSL_GUARDED_BY(mu_);
  std::map<int32_t, GpuWait> gpu_waits_ ABSL_GUARDED_BY(mu_);

  // Serialises Probe/Apply: one change of a container's toolchain at a time.
  absl::Mutex tool_mu_;

  std::thread loop_thread_;
  std::thread readiness_thread_;
};

}  // namespace fleet::agent

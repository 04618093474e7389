// Agent::ServerRun: one attempt of one server inside the agent, from its launch (or its adoption
// after an agent restart, or its wait for a free GPU) to its exit or stop: its process and process
// group, its log follower and classifier, its timers (readiness probes, CPU sampling, stall and
// startup deadline, stop escalation), and the events it emits through the agent. The Agent owns
// the runs (Agent::servers_, Agent::draining_) and drives them from its event loop.
//
// Thread-safety: none of its own. A run lives in the Agent and is used only under Agent::mu_; the
// classifier and the follower call back into it from inside the loop, which holds the lock (the
// callbacks assert it). A process or group is signalled only when its leader's identity (pid +
// start time) is verified at that moment (SignalServerGroup).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "agent/log_follower.h"
#include "agent/process_launcher.h"
#include "agent/readiness.h"
#include "common/base/unique_fd.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis.h"
#include "proto/agent.pb.h"
#include "proto/states.pb.h"

namespace fleet::agent {

// The state a classifier's phase reports (LOADING, JIT_COMPILING, ... between STARTING and READY).
fleet::v1::ServerState StateOfPhase(diagnosis::Phase phase);

// The server's name, host/ctid/gpuN (the kMarkServer value), the agent's own identity where
// the spec names none. Two containers' agents may see each other's processes (a simulated
// container is a chroot): the name keeps one agent's servers from the other's.
std::string ServerMark(const fleet::v1::ServerSpec& spec, const AgentOptions& options);

class Agent::ServerRun : public diagnosis::ClassifierListener, public LogFollower::Sink {
 public:
  ServerRun(Agent* agent, fleet::v1::ServerSpec spec, std::string attempt_id,
            int64_t attempt_number);

  int32_t gpu() const { return spec_.server().gpu(); }
  // The server's own readiness.interval from the config when it has one, else the agent's
  // --readiness-interval.
  absl::Duration ReadinessInterval() const;
  const fleet::v1::ServerSpec& spec() const { return spec_; }
  const std::string& attempt_id() const { return attempt_id_; }
  int64_t attempt_number() const { return attempt_number_; }

  // --- LogFollower::Sink
  void OnData(std::string_view bytes) override;

  // --- diagnosis::ClassifierListener (called inside AddBytes, under the agent's lock)
  void OnPhaseChanged(diagnosis::Phase phase, std::string_view detail, int64_t line) override;

  void OnProgress(int64_t step, int64_t total, int64_t line) override;

  void OnRootCause(int64_t line) override;

  void OnFailingUnitEnded(int64_t line) override;

  // --- lifecycle
  absl::Status StartFollowing(bool replay);

  void Launched(ServerProcess process, absl::Time now);

  void Adopted(const fleet::v1::ServerRecord& record, UniqueFd pidfd, absl::Time now);

  void Restored(const fleet::v1::ServerRecord& record);

  void PollLog();

  // The process has exited (pidfd readable), or was found dead after an agent restart.
  void Exited(absl::Time now, bool status_known);

  void RequestStop(absl::Time now, absl::Duration grace);

  void Ready(const ReadinessResult& result, absl::Time now);

  // Signals the server's process group, verified right before (SignalServerGroup); a group that
  // cannot be verified is left alone and said so, once.
  void KillGroup(int sig);

  // Reaps the dead of the server's group that are the agent's children, the leader last (it
  // holds the group's id while members are left); true once no process of the group is left, or
  // once the group cannot be verified (its leader gone or another process: nothing of it is the
  // agent's to wait for).
  bool ReapGroup();

  // Timers: readiness, CPU sampling, stall and deadline, stop escalation. Returns the next time
  // this run needs attention.
  absl::Time Tick(absl::Time now);

  void ProbeDone(const ReadinessResult& result, absl::Time now);

  fleet::v1::ServerRecord Record() const;

  fleet::v1::ServerStatus Status() const;

  bool alive() const { return alive_; }

  // --- waiting for a free GPU (gpu_guard.h): the attempt holds its GPU's place, no process yet.
  bool waiting_for_gpu() const { return waiting_for_gpu_; }
  void WaitForGpu(absl::Time now, std::string detail);
  // A look at the GPU found it busy: says who holds it (an event when that changed).
  void GpuBusy(const std::string& detail);
  // The attempt ends without a process: stopped while it waited (`failure` empty), or failed
  // with `failure` as its diagnosis (the GPU stayed busy, or the launch itself failed).
  void NotLaunched(absl::Time now, const diagnosis::Diagnosis& failure);
  bool ready() const { return ready_; }
  // Exited, and nothing of its group is left to kill or reap.
  bool drained() const { return exited_ && group_gone_; }

  // After a re-adoption: one event that says where the server is now.
  void AnnounceAdopted();

 private:
  fleet::v1::AgentEvent NewEvent() const;

  void EmitDiagnosis(const diagnosis::Diagnosis& d, bool final);

  void EmitStalled(const std::string& diagnosis_class, const std::string& summary);

  Agent* const agent_;
  const fleet::v1::ServerSpec spec_;
  const std::string attempt_id_;
  const int64_t attempt_number_;
  const std::map<std::string, std::string> env_;

  std::unique_ptr<diagnosis::Classifier> classifier_;
  std::unique_ptr<LogFollower> follower_;
  pid_t pid_ = 0;
  uint64_t start_ticks_ = 0;
  UniqueFd pidfd_;
  bool is_child_ = false;
  bool alive_ = false;
  bool exited_ = false;
  bool finished_ = false;          // the classifier has seen the end of the log
  bool group_gone_ = false;        // no process of the server's group is left (or none verifiable)
  bool group_unverified_ = false;  // its leader's pid is gone or another process's: never signal
  bool ready_ = false;
  bool stop_requested_ = false;
  bool waiting_for_gpu_ = false;  // no process yet: the launch waits for its GPU
  bool replaying_ = false;
  bool probe_in_flight_ = false;
  bool stall_reported_ = false;
  bool deadline_reported_ = false;
  fleet::v1::ServerState state_ = fleet::v1::SERVER_STATE_STARTING;
  std::string phase_detail_;
  int64_t progress_step_ = 0;
  int64_t progress_total_ = 0;
  uint64_t cpu_ticks_ = 0;
  absl::Time started_at_;
  absl::Time last_progress_at_;
  absl::Time next_probe_at_ = absl::InfiniteFuture();
  absl::Time next_sample_at_ = absl::InfiniteFuture();
  absl::Time stop_deadline_ = absl::InfiniteFuture();
  fleet::v1::ProcessExit exit_;
  std::optional<fleet::v1::Diagnosis> final_diagnosis_;
};

}  // namespace fleet::agent

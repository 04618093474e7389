// GpuGuard: makes sure a GPU is free before a server is (re)launched on it, so a relaunch finds
// the memory its predecessor held instead of dying with CUDA out of memory next to it.
//
// One look at a GPU (Check) does, in this order:
//   1. Leftovers of the server that ran there before: the live members of its recorded session
//      (the server is its session's leader: session = group = the leader's pid) and every
//      process inside the container whose /proc/PID/fd links to the GPU's device node
//      (/dev/nvidiaN). Those of the previous server's own session are killed, each after its
//      identity is verified at that moment (a pidfd, then /proc/PID/stat: same start time, same
//      session, and the session is still the recorded one), and reaped where the agent is their
//      parent (it is the container's subreaper). So are the agent's servers on this GPU that its
//      record lost (its state dir wiped, or a lost tail): processes of the agent's uid whose
//      environment carries the agent's marks for this server (kMarkAgent, kMarkServer below),
//      verified the same way (same start time, the marks still there). Any other holder is
//      reported, never signalled.
//   2. The GPU's memory, from `nvidia-smi --query-gpu=memory.used -i N`: free means below
//      free_threshold_mib. When it is not free, `--query-compute-apps` says who holds it: inside
//      LXC those pids are the host's, so they are reported and never signalled.
// No nvidia-smi (or one that fails): the memory is unknown and the GPU counts as free, with a
// note; the leftovers are still reclaimed.
//
// The agent checks once in its Launch call (no lock of its own held) and starts at once when the
// GPU is free. Waiting (Submit/Step/Start): a launch whose GPU is busy is checked again every
// recheck_interval until it is free (kFree: launch now) or max_wait has passed (kGaveUp: report
// who holds it instead of launching into an out-of-memory). Each check's result goes to the
// listener, on the guard's thread (or the caller of Step), so the agent's loop never blocks on
// nvidia-smi. Step(now) is one turn that tests drive with a fake clock; Start() runs it on a
// thread of its own that wakes at once on Submit, Cancel and destruction.
//
// Thread-safe. The listener is called with no lock of the guard held except listener_mu_, so
// SetListener(nullptr) returns only once no call is in flight (the listener's owner may then go).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/command_runner.h"
#include "agent/proc.h"
#include "common/base/clock.h"

namespace fleet::agent {

struct GpuGuardOptions {
  // The /proc of the container (tests point it elsewhere).
  std::string proc_root = "/proc";
  // The device node of GPU N: one "%d", replaced by the GPU's minor number (nvidia-smi's
  // minor_number when it answers, else the index). Tests use a plain file.
  std::string device_pattern = "/dev/nvidia%d";
  // Free: memory.used below this. An idle GPU shows a few MiB (up to a few hundred on drivers
  // that count reserved memory); a CUDA context alone is about 500 MiB, a loaded model GiBs.
  int64_t free_threshold_mib = 1024;
  // How long a launch waits for its GPU, and how often it looks again meanwhile.
  absl::Duration max_wait = absl::Minutes(5);
  absl::Duration recheck_interval = absl::Seconds(2);
  // How long a killed leftover may take to die before it is reported as still there.
  // The first check runs inside the agent's Launch call (a caller's deadline is 15 s; a repeat of
  // the call is idempotent): at most 3 nvidia-smi runs and one reap, each bounded.
  absl::Duration reap_timeout = absl::Seconds(5);
  absl::Duration nvidia_smi_timeout = absl::Seconds(5);
};

// The marks the agent puts in the environment of every server it starts (and its children
// inherit): the agent's state dir, absolute, with its root's device:inode (one agent per state
// dir and root: its identity), the server's
// name (host/ctid/gpuN: two containers' agents may share a state dir path and see each other's
// processes, as the simulated host's chroot containers do), the attempt. A process of the agent's
// own uid that carries the agent's marks for a server is a server this agent started, or a child of
// one, even when the agent's record of it is gone. Only the agent's uid could have put them there:
// such a process is this agent's, or its own user's to lose.
inline constexpr char kMarkAgent[] = "FLEET_AGENT";
inline constexpr char kMarkServer[] = "FLEET_SERVER";
inline constexpr char kMarkAttempt[] = "FLEET_ATTEMPT_ID";

// The server that ran on the GPU before, as the agent recorded it: its session (its pid: it is
// the session's leader) and the leader's start time (clock ticks since boot). session 0: none.
struct PreviousServer {
  pid_t session = 0;
  uint64_t start_ticks = 0;
};

struct GpuRequest {
  int32_t gpu = 0;  // the server's lead GPU: what Submit and Cancel key the request by
  // Every GPU of the server, `gpu` first (a tensor-parallel server's); empty: `gpu` alone. Check
  // looks at each and the server may start only when all are free.
  std::vector<int32_t> gpus;
  // Who asks (the agent's attempt id): echoed to the listener, so a stale answer is recognised.
  std::string key;
  PreviousServer previous;
  // The agent's kMarkAgent value and the server's name (kMarkServer: host/ctid/gpuN): the
  // agent's servers of that name that it no longer knows are reclaimed. Empty: none looked for.
  std::string owner;
  std::string server;
  // nvidia-smi's argv prefix (the config's tools.nvidia_smi); empty: "nvidia-smi" on env's PATH.
  std::vector<std::string> nvidia_smi;
  std::map<std::string, std::string> env;  // the server's environment (PATH for nvidia-smi)
};

// A process inside the container.
struct GpuProcess {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  pid_t session = 0;
  std::string comm;
};

// A process nvidia-smi lists on the GPU. Inside LXC, pid is the host's pid namespace.
struct ComputeApp {
  int64_t pid = 0;
  std::string name;
  int64_t used_mib = -1;  // -1: not reported ([N/A])
};

// One look at a server's GPUs. For a server on several, the lists hold what was found on each and
// gpu/used_mib/device/apps are those of the first busy one (the lead when all are free).
struct GpuCheck {
  int32_t gpu = 0;
  bool free = false;
  int64_t used_mib = -1;  // -1: unknown (no nvidia-smi answer)
  int64_t threshold_mib = 0;
  std::string device;                 // the device node looked for
  std::vector<GpuProcess> reclaimed;  // the previous server's leftovers, killed and reaped
  std::vector<GpuProcess> orphans;    // the agent's marked servers it had lost, killed and reaped
  std::vector<GpuProcess> others;     // holders of the device inside the container: not ours
  std::vector<GpuProcess> stuck;      // ours, killed, and still there after reap_timeout
  std::vector<ComputeApp> apps;       // nvidia-smi's list when the GPU is busy
  std::vector<std::string> notes;     // what could not be looked at, and why

  // One line: "gpu 0: 70123 MiB used (free below 1024 MiB); held by pid 4242 (python3, 70000
  // MiB; a host pid, not signalled); ...; killed the previous server's leftover pid 77 (python3)".
  std::string Summary() const;
};

// Processes under `proc_root` with a descriptor open on `device` (a /proc/PID/fd link to it).
std::vector<GpuProcess> FindDeviceHolders(const std::string& proc_root, const std::string& device);

// Processes under `proc_root` (not this one) of real uid `uid` whose environment holds
// kMarkAgent=`owner` and kMarkServer=`server` (and kMarkAttempt=`attempt` unless it is empty), at
// most 64, by pid. An environment is read up to 1 MiB.
std::vector<GpuProcess> FindMarkedProcesses(const std::string& proc_root, const std::string& owner,
                                            const std::string& server, uid_t uid,
                                            const std::string& attempt = "");

// `nvidia-smi --query-gpu=memory.used[,minor_number] --format=csv,noheader,nounits` output: the
// first line's fields. InvalidArgument when it holds no number.
absl::StatusOr<int64_t> ParseMemoryUsed(absl::string_view csv);
// `--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits` output.
// Lines that are not three fields with a numeric pid are skipped (nvidia-smi's "No running
// processes found"); at most 64 entries.
std::vector<ComputeApp> ParseComputeApps(absl::string_view csv);

class GpuGuard {
 public:
  enum class Verdict {
    kFree,     // launch now
    kWaiting,  // still busy: look again later (the check says who holds it)
    kGaveUp,   // busy for max_wait: do not launch
  };
  using Listener = std::function<void(const GpuRequest&, const GpuCheck&, Verdict)>;

  // `runner` runs nvidia-smi; `clock` times the waits. Both must outlive the guard.
  GpuGuard(GpuGuardOptions options, CommandRunner* runner, const Clock* clock);
  // Stops the thread, if started. No listener call is in flight after it.
  ~GpuGuard();
  GpuGuard(const GpuGuard&) = delete;
  GpuGuard& operator=(const GpuGuard&) = delete;

  const GpuGuardOptions& options() const { return options_; }

  // One look at the server's GPUs now (see the file comment), each in turn: free only when all
  // are. Blocks while nvidia-smi runs and while a killed leftover dies (at most reap_timeout).
  GpuCheck Check(const GpuRequest& request);

  void SetListener(Listener listener) ABSL_LOCKS_EXCLUDED(listener_mu_);
  // Queues a launch that waits for its GPU: checked at the next Step, or one recheck_interval
  // from now when the caller has just checked it. Replaces a request queued for the same GPU.
  void Submit(GpuRequest request, bool checked_now = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the queued request of `gpu` when its key is `key` (a stopped or replaced launch).
  void Cancel(int32_t gpu, const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Checks every queued request that is due at the clock's now and tells the listener; returns
  // when the next one is due (InfiniteFuture when none is queued).
  absl::Time Step() ABSL_LOCKS_EXCLUDED(mu_, listener_mu_);
  // Runs Step on a thread of its own until destruction.
  void Start();

 private:
  struct Waiting {
    GpuRequest request;
    absl::Time since;
    absl::Time next_check;
  };

  // Check's look at one of the request's GPUs.
  GpuCheck CheckOne(const GpuRequest& request, int32_t gpu);
  // Kills and reaps one leftover; false when it could not be verified (it is then left alone) or
  // did not die in time. `verify` is asked about the process once a pidfd pins it.
  bool Reclaim(const GpuProcess& p, const std::function<bool(const ProcStat&)>& verify, bool* gone);
  void Loop();

  // Constant after construction.
  const GpuGuardOptions options_;
  CommandRunner* const runner_;
  const Clock* const clock_;

  absl::Mutex mu_;
  std::map<int32_t, Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Submit/Cancel: wakes the loop

  absl::Mutex listener_mu_;
  Listener listener_ ABSL_GUARDED_BY(listener_mu_);

  std::thread thread_;
};

}  // namespace fleet::agent

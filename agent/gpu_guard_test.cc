// The GPU check before a launch (gpu_guard.h), with real processes: a plain file stands in for
// /dev/nvidia0 (the /proc scan's device pattern points at it), the simulated world's nvidia-smi
// answers from the world's GPU-memory records, and a FakeClock times the waits: the tests call
// GpuGuard::Step() themselves, so nothing sleeps.
#include "agent/gpu_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/agent.h"
#include "agent/proc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Orphans of a "server" killed in a test become the test's children, as they become the agent's.
void BecomeSubreaper() { ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }

bool Alive(pid_t pid, uint64_t start_ticks) { return IsSameLiveProcess(pid, start_ticks); }

uint64_t StartTicks(pid_t pid) {
  const std::optional<ProcStat> s = ReadProcStat(pid);
  return s ? s->start_ticks : 0;
}

// Whether `pid` was reaped already (by someone else than this call): no child of that pid left.
bool Reaped(pid_t pid) { return waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD; }

// A process of a session of its own that keeps `path` open until killed. The test's child: the
// test kills and reaps it (Finish).
pid_t HoldOpen(const std::string& path) {
  int ready[2];
  EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    const char c = open(path.c_str(), O_RDONLY) >= 0 ? 'k' : 'e';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  EXPECT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'k') << "the holder could not open " << path;
  close(ready[0]);
  return pid;
}

void Finish(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// Kills (if still the same process) and reaps what a test started, however the test ends.
class Reaper {
 public:
  ~Reaper() {
    for (const auto& [pid, ticks] : started_) {
      const std::optional<ProcStat> s = ReadProcStat(pid);
      if (!s || s->start_ticks != ticks) continue;
      kill(pid, SIGKILL);
      if (s->ppid == getpid()) waitpid(pid, nullptr, 0);
    }
  }
  pid_t Add(pid_t pid) {
    started_.emplace_back(pid, StartTicks(pid));
    return pid;
  }

 private:
  std::vector<std::pair<pid_t, uint64_t>> started_;
};

// A server that died and left a child behind: a session leader whose child keeps `path` open;
// the leader is killed and reaped, the child stays in the session (now this process's child).
struct DeadServer {
  PreviousServer recorded;
  pid_t leftover = 0;
  uint64_t leftover_ticks = 0;
};

DeadServer StartServerAndKillIt(const std::string& path) {
  int ready[2];
  EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t leader = fork();
  if (leader == 0) {
    setsid();
    if (fork() == 0) {
      const char c = open(path.c_str(), O_RDONLY) >= 0 ? 'k' : 'e';
      if (write(ready[1], &c, 1) != 1) _exit(1);
      for (;;) pause();
    }
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  EXPECT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'k');
  close(ready[0]);
  DeadServer dead;
  dead.recorded = {leader, StartTicks(leader)};
  for (const SessionProcess& p : ListSession(leader)) {
    if (p.stat.pid != leader) dead.leftover = p.stat.pid;
  }
  EXPECT_GT(dead.leftover, 0);
  dead.leftover_ticks = StartTicks(dead.leftover);
  kill(leader, SIGKILL);
  waitpid(leader, nullptr, 0);
  return dead;
}

// A container's view of its GPUs: the simulated world's nvidia-smi with two GPUs, its memory
// records, and files standing in for /dev/nvidia0 and /dev/nvidia1.
class GpuWorld {
 public:
  GpuWorld() {
    dir_.WriteFile("etc/nvidia-smi.csv",
                   "0,NVIDIA RTX PRO 6000 Blackwell,12.0,97887,GPU-a0,00000000:01:00.0\n"
                   "1,NVIDIA RTX PRO 6000 Blackwell,12.0,97887,GPU-a1,00000000:02:00.0\n");
    dir_.WriteFile("etc/nvidia-driver.conf", "driver_version=580.95.05\ncuda_version=13.2\n");
    std::filesystem::create_directories(dir_.Join("bin"));
    std::filesystem::copy_file(fleet::testing::SourcePath("tests/sim/tools/nvidia-smi"), Smi());
    std::filesystem::permissions(Smi(), std::filesystem::perms::owner_all);
    dir_.WriteFile("dev/nvidia0", "");
    dir_.WriteFile("dev/nvidia1", "");
  }

  std::string Smi() const { return dir_.Join("bin/nvidia-smi"); }
  std::string Device(int gpu) const { return dir_.Join(absl::StrCat("dev/nvidia", gpu)); }
  std::string Join(const std::string& relative) const { return dir_.Join(relative); }

  // `pid` holds `mib` of GPU `gpu`'s memory while it lives, as a simulated scheduler records it.
  void HoldMemory(int gpu, pid_t pid, int64_t mib, const std::string& name) const {
    dir_.WriteFile(absl::StrCat("run/gpu-mem/", gpu, "/", pid),
                   absl::StrCat(mib, " ", StartTicks(pid), " ", name, "\n"));
  }

  // A process outside the container as far as /proc can tell (it holds no device node here; only
  // nvidia-smi knows it) holding `mib` of GPU `gpu` as "python3"; `reaper` ends it.
  pid_t Busy(Reaper* reaper, int gpu, int64_t mib) const {
    const pid_t holder = reaper->Add(HoldOpen(Join("etc/nvidia-smi.csv")));
    HoldMemory(gpu, holder, mib, "python3");
    return holder;
  }

  GpuGuardOptions Options() const {
    GpuGuardOptions o;
    o.device_pattern = dir_.Join("dev/nvidia%d");
    o.free_threshold_mib = 1024;
    o.max_wait = absl::Seconds(60);
    o.recheck_interval = absl::Seconds(2);
    return o;
  }

  GpuRequest Request(int gpu, PreviousServer previous = {}) const {
    GpuRequest r;
    r.gpu = gpu;
    r.key = "attempt-1";
    r.previous = previous;
    r.nvidia_smi = {Smi()};
    r.env = {{"PATH", "/usr/bin:/bin"}};
    return r;
  }

 private:
  fleet::testing::TempDir dir_;
};

// A guard on a GpuWorld with a fake clock, and the reaper of what a test starts.
struct GuardedWorld {
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard{world.Options(), &runner, &clock};
  Reaper reaper;
};

std::vector<pid_t> Pids(const std::vector<GpuProcess>& ps) {
  std::vector<pid_t> out;
  for (const GpuProcess& p : ps) out.push_back(p.pid);
  return out;
}

TEST(GpuGuard, KillsAndReapsTheLeftoverOfThePreviousServer) {
  BecomeSubreaper();
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  Reaper reaper;
  const DeadServer dead = StartServerAndKillIt(world.Device(0));
  reaper.Add(dead.leftover);
  ASSERT_TRUE(Alive(dead.leftover, dead.leftover_ticks));

  const GpuCheck check = guard.Check(world.Request(0, dead.recorded));

  EXPECT_EQ(check.device, world.Device(0));
  EXPECT_EQ(Pids(check.reclaimed), std::vector<pid_t>{dead.leftover});
  EXPECT_THAT(check.others, IsEmpty());
  EXPECT_THAT(check.stuck, IsEmpty());
  EXPECT_FALSE(Alive(dead.leftover, dead.leftover_ticks));
  EXPECT_TRUE(Reaped(dead.leftover)) << "the guard reaps what it kills";
  EXPECT_TRUE(check.free);
  EXPECT_EQ(check.used_mib, 1);
  EXPECT_THAT(check.Summary(), HasSubstr(absl::StrCat(
                                   "killed the previous server's leftovers: pid ", dead.leftover)));
}

TEST(GpuGuard, ReportsAHolderOfAnotherSessionAndLeavesItAlive) {
  BecomeSubreaper();
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  Reaper reaper;
  const DeadServer dead = StartServerAndKillIt(world.Device(0));
  reaper.Add(dead.leftover);
  const pid_t bystander = reaper.Add(HoldOpen(world.Device(0)));
  const uint64_t bystander_ticks = StartTicks(bystander);
  // A holder of the other GPU is nobody's business here.
  const pid_t elsewhere = reaper.Add(HoldOpen(world.Device(1)));

  const GpuCheck check = guard.Check(world.Request(0, dead.recorded));

  EXPECT_EQ(Pids(check.reclaimed), std::vector<pid_t>{dead.leftover});
  EXPECT_EQ(Pids(check.others), std::vector<pid_t>{bystander});
  EXPECT_TRUE(Alive(bystander, bystander_ticks)) << "another session's holder is never signalled";
  EXPECT_FALSE(Alive(dead.leftover, dead.leftover_ticks));
  EXPECT_THAT(check.Summary(), HasSubstr(absl::StrCat("pid ", bystander)));
  EXPECT_THAT(check.Summary(), HasSubstr("not signalled"));
  EXPECT_THAT(check.Summary(), Not(HasSubstr(absl::StrCat("pid ", elsewhere, " "))));
  Finish(bystander);
  Finish(elsewhere);
}

TEST(GpuGuard, ARecordedPidNowAnotherProcessIsNotThePreviousServer) {
  BecomeSubreaper();
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  // The record names this pid and session, but with another start time: after a container
  // reboot the pid belongs to someone else, whose session it now leads.
  Reaper reaper;
  const pid_t stranger = reaper.Add(HoldOpen(world.Device(0)));
  const uint64_t ticks = StartTicks(stranger);

  const GpuCheck check = guard.Check(world.Request(0, {stranger, ticks + 1}));

  EXPECT_THAT(check.reclaimed, IsEmpty());
  EXPECT_EQ(Pids(check.others), std::vector<pid_t>{stranger});
  EXPECT_TRUE(Alive(stranger, ticks));
  Finish(stranger);
}

TEST(GpuGuard, BusyMemoryNamesTheHolderAndTheLaunchWaitsUntilItIsFreed) {
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  // Outside the container as far as /proc can tell (it holds no device node here): only
  // nvidia-smi knows it.
  Reaper reaper;
  const pid_t holder = reaper.Add(HoldOpen(world.Join("etc/nvidia-smi.csv")));
  const uint64_t holder_ticks = StartTicks(holder);
  world.HoldMemory(0, holder, 70000, "python3");

  std::vector<std::pair<GpuGuard::Verdict, std::string>> answers;
  guard.SetListener([&](const GpuRequest& r, const GpuCheck& c, GpuGuard::Verdict v) {
    EXPECT_EQ(r.key, "attempt-1");
    answers.emplace_back(v, c.Summary());
  });
  guard.Submit(world.Request(0));
  const absl::Time t0 = clock.Now();

  EXPECT_EQ(guard.Step(), t0 + absl::Seconds(2));
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].first, GpuGuard::Verdict::kWaiting);
  EXPECT_THAT(answers[0].second, HasSubstr("gpu 0: 70001 MiB used (free below 1024 MiB)"));
  EXPECT_THAT(answers[0].second,
              HasSubstr(absl::StrCat("held by pid ", holder, " (python3, 70000 MiB)")));
  EXPECT_TRUE(Alive(holder, holder_ticks)) << "nvidia-smi's pids are reported, never signalled";

  // Not due yet: nothing is checked.
  guard.Step();
  EXPECT_EQ(answers.size(), 1u);

  Finish(holder);
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(guard.Step(), absl::InfiniteFuture());
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].first, GpuGuard::Verdict::kFree);
}

TEST(GpuGuard, GivesUpAfterTheWaitAndSaysWhoHoldsTheGpu) {
  GuardedWorld g;
  auto& [world, runner, clock, guard, reaper] = g;
  const pid_t holder = world.Busy(&reaper, 1, 9000);
  std::vector<GpuGuard::Verdict> verdicts;
  std::string last;
  guard.SetListener([&](const GpuRequest&, const GpuCheck& c, GpuGuard::Verdict v) {
    verdicts.push_back(v);
    last = c.Summary();
  });
  guard.Submit(world.Request(1));
  guard.Step();
  clock.Advance(absl::Seconds(61));
  guard.Step();
  EXPECT_EQ(verdicts, (std::vector<GpuGuard::Verdict>{GpuGuard::Verdict::kWaiting,
                                                      GpuGuard::Verdict::kGaveUp}));
  EXPECT_THAT(last, HasSubstr(absl::StrCat("held by pid ", holder)));
  // Given up: no longer checked.
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(guard.Step(), absl::InfiniteFuture());
  EXPECT_EQ(verdicts.size(), 2u);
  Finish(holder);
}

TEST(GpuGuard, ATensorParallelServerWaitsUntilEachOfItsGpusIsFree) {
  GuardedWorld g;
  auto& [world, runner, clock, guard, reaper] = g;
  const pid_t holder = world.Busy(&reaper, 1, 9000);
  // GPU 0 alone is free: the busy GPU 1 is not its business.
  EXPECT_TRUE(guard.Check(world.Request(0)).free);

  GpuRequest both = world.Request(0);
  both.gpus = {0, 1};
  std::vector<std::pair<GpuGuard::Verdict, std::string>> answers;
  guard.SetListener([&](const GpuRequest&, const GpuCheck& c, GpuGuard::Verdict v) {
    answers.emplace_back(v, c.Summary());
  });
  guard.Submit(both);
  guard.Step();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].first, GpuGuard::Verdict::kWaiting);
  EXPECT_THAT(answers[0].second, HasSubstr("gpu 1: 9001 MiB used"));
  EXPECT_THAT(answers[0].second, HasSubstr(absl::StrCat("held by pid ", holder)));
  // The lead's order does not matter: a server led by GPU 1 is busy the same.
  GpuRequest led_by_1 = world.Request(1);
  led_by_1.gpus = {1, 0};
  EXPECT_FALSE(guard.Check(led_by_1).free);

  Finish(holder);
  clock.Advance(absl::Seconds(2));
  guard.Step();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].first, GpuGuard::Verdict::kFree);
}

TEST(GpuGuard, WithoutNvidiaSmiTheGpuCountsAsFreeAndSaysSo) {
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  GpuRequest r = world.Request(0);
  r.nvidia_smi = {world.Join("bin/no-such-nvidia-smi")};
  const GpuCheck check = guard.Check(r);
  EXPECT_TRUE(check.free);
  EXPECT_EQ(check.used_mib, -1);
  EXPECT_THAT(check.Summary(), HasSubstr("memory not checked"));
}

// The H200's driver (580) refuses --query-gpu=minor_number ("not a valid field to query"): the
// GPU's index names its device node, and the refusal is not shown as if something were wrong.
TEST(GpuGuard, ADriverWithoutTheMinorNumberFieldLeavesTheIndexQuietly) {
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  const std::string wrapper = world.Join("bin/nvidia-smi-580");
  {
    std::ofstream out(wrapper);
    out << "#!/bin/bash\n"
        << "if [[ $1 == --query-gpu=minor_number ]]; then\n"
        << "  echo 'Field \"minor_number\" is not a valid field to query.'; exit 2\n"
        << "fi\n"
        << "exec " << world.Smi() << " \"$@\"\n";
  }
  ASSERT_EQ(chmod(wrapper.c_str(), 0755), 0);
  GpuRequest r = world.Request(1);
  r.nvidia_smi = {wrapper};
  const GpuCheck check = guard.Check(r);
  EXPECT_TRUE(check.free);
  EXPECT_EQ(check.device, world.Device(1));
  EXPECT_THAT(check.notes, ::testing::IsEmpty());
  EXPECT_THAT(check.Summary(), ::testing::Not(HasSubstr("minor_number")));
}

// A process that runs `sleep` with exactly `env` (a server the agent started, as far as the
// environment says); the test's child.
pid_t StartWithEnv(const std::vector<std::string>& env) {
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // The write end closes on exec: EOF on the read end says the exec happened.
  int execd[2];
  EXPECT_EQ(pipe2(execd, O_CLOEXEC), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    execle("/bin/sleep", "sleep", "600", static_cast<char*>(nullptr), envp.data());
    _exit(127);
  }
  close(execd[1]);
  char c = 0;
  EXPECT_EQ(read(execd[0], &c, 1), 0);
  close(execd[0]);
  return pid;
}

TEST(GpuGuard, KillsTheAgentsOwnServersItsRecordLostAndNoOtherMarkedProcess) {
  BecomeSubreaper();
  GpuWorld world;
  PosixCommandRunner runner;
  fleet::testing::FakeClock clock;
  GpuGuard guard(world.Options(), &runner, &clock);
  Reaper reaper;
  const std::string owner = "/var/lib/agent-a";
  const std::string mark = absl::StrCat(kMarkAgent, "=", owner);
  // This agent's server on GPU 0 (its record gone), holding the memory.
  const pid_t lost =
      reaper.Add(StartWithEnv({mark, absl::StrCat(kMarkServer, "=pve1/200/gpu0"), "PATH=/bin"}));
  world.HoldMemory(0, lost, 70000, "python3");
  // Its server on GPU 1, another agent's on GPU 0, and an unmarked holder of the device.
  const pid_t gpu1 = reaper.Add(StartWithEnv({mark, absl::StrCat(kMarkServer, "=pve1/200/gpu1")}));
  const pid_t other_agent = reaper.Add(StartWithEnv({absl::StrCat(kMarkAgent, "=/var/lib/agent-b"),
                                                     absl::StrCat(kMarkServer, "=pve1/200/gpu0")}));
  const pid_t bystander = reaper.Add(HoldOpen(world.Device(0)));
  // The same agent state dir in another container (two chroot containers of one host, as the
  // simulated Proxmox host makes them, both with /var/lib/gpu-fleet-agent): not this server.
  const pid_t other_container =
      reaper.Add(StartWithEnv({mark, absl::StrCat(kMarkServer, "=pve1/201/gpu0")}));
  // A prefix of the owner is not the owner.
  const pid_t prefix = reaper.Add(
      StartWithEnv({absl::StrCat(mark, "-old"), absl::StrCat(kMarkServer, "=pve1/200/gpu0")}));
  const std::vector<pid_t> spared = {gpu1, other_agent, other_container, bystander, prefix};
  std::vector<uint64_t> spared_ticks;
  for (pid_t p : spared) spared_ticks.push_back(StartTicks(p));
  const uint64_t lost_ticks = StartTicks(lost);

  // Without the owner's mark, the GPU is busy and nothing is signalled.
  GpuCheck check = guard.Check(world.Request(0));
  EXPECT_FALSE(check.free);
  EXPECT_TRUE(Alive(lost, lost_ticks));

  GpuRequest request = world.Request(0);
  request.owner = owner;
  request.server = "pve1/200/gpu0";
  check = guard.Check(request);
  EXPECT_THAT(Pids(check.orphans), ::testing::ElementsAre(lost)) << check.Summary();
  EXPECT_FALSE(Alive(lost, lost_ticks));
  EXPECT_TRUE(Reaped(lost));
  EXPECT_TRUE(check.free) << check.Summary();
  EXPECT_THAT(check.Summary(), HasSubstr("record had lost"));
  EXPECT_THAT(Pids(check.others), ::testing::ElementsAre(bystander));
  for (size_t i = 0; i < spared.size(); ++i) {
    EXPECT_TRUE(Alive(spared[i], spared_ticks[i])) << "pid " << spared[i] << " was touched";
  }
  for (pid_t p : spared) Finish(p);
}

TEST(GpuGuard, ParsesNvidiaSmiAnswers) {
  EXPECT_EQ(*ParseMemoryUsed("70123\n"), 70123);
  EXPECT_EQ(*ParseMemoryUsed("512, 3\n"), 512);
  EXPECT_EQ(*ParseMemoryUsed("4 MiB\n"), 4);
  EXPECT_FALSE(ParseMemoryUsed("[N/A]\n").ok());
  EXPECT_FALSE(ParseMemoryUsed("No devices were found\n").ok());
  const std::vector<ComputeApp> apps = ParseComputeApps(
      "4242, python3, 70000\n77, [Not Found], [N/A]\nNo running processes found\n");
  ASSERT_EQ(apps.size(), 2u);
  EXPECT_EQ(apps[0].pid, 4242);
  EXPECT_EQ(apps[0].name, "python3");
  EXPECT_EQ(apps[0].used_mib, 70000);
  EXPECT_EQ(apps[1].name, "[Not Found]");
  EXPECT_EQ(apps[1].used_mib, -1);
}

// --- The agent's launch path -------------------------------------------------------------------

class NeverReady : public ReadinessProber {
 public:
  ReadinessResult Check(const ReadinessCheck&) override { return {}; }
};

class AgentWithGuard {
 public:
  explicit AgentWithGuard(bool with_guard) {
    if (with_guard) guard_ = std::make_unique<GpuGuard>(world_.Options(), &runner_, &clock_);
    Restart();
  }
  // A new agent on the same state dir (the first, if any, goes: an agent restart). With `wipe`,
  // the state dir is emptied between the two, as if someone deleted it; the servers live on.
  void Restart(bool wipe = false) {
    agent_.reset();
    if (wipe) std::filesystem::remove_all(dir_.Join("state"));
    AgentOptions options;
    options.state_dir = dir_.Join("state");
    options.stop_grace = absl::Milliseconds(300);
    auto agent = Agent::Create(options, {&clock_, &launcher_, &prober_, &runner_, guard_.get()});
    EXPECT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
  }
  ~AgentWithGuard() {
    if (agent_ == nullptr) return;
    const fleet::v1::StatusResponse status = agent_->Status();
    for (const fleet::v1::ServerStatus& s : status.servers()) {
      if (s.pid() > 0) kill(-s.pid(), SIGKILL);
    }
    agent_.reset();
  }

  fleet::v1::ServerSpec Spec(int gpu, std::vector<std::string> args) const {
    fleet::v1::ServerSpec spec;
    spec.mutable_server()->set_gpu(gpu);
    spec.add_argv(fleet::testing::BuildPath("tests/testing/fleet-test-child"));
    for (std::string& a : args) spec.add_argv(std::move(a));
    (*spec.mutable_env())["PATH"] = "/usr/bin:/bin";
    spec.set_log_path(dir_.Join(absl::StrCat("logs/gpu", gpu, ".log")));
    spec.set_port(1);
    spec.mutable_tools()->add_nvidia_smi(world_.Smi());
    return spec;
  }

  absl::StatusOr<fleet::v1::LaunchResponse> Launch(const fleet::v1::ServerSpec& spec,
                                                   const std::string& attempt, int64_t number) {
    fleet::v1::LaunchRequest r;
    r.set_attempt_id(attempt);
    r.set_attempt_number(number);
    *r.mutable_spec() = spec;
    return agent_->Launch(r);
  }

  fleet::v1::ServerStatus StatusOf(int gpu) {
    const fleet::v1::StatusResponse status = agent_->Status();
    for (const fleet::v1::ServerStatus& s : status.servers()) {
      if (s.server().gpu() == gpu) return s;
    }
    return {};
  }

  // Runs the loop until the log of `gpu` holds `text`, or 20 s of real time pass.
  bool RunUntilLog(int gpu, const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (absl::StrContains(
              fleet::testing::ReadFile(dir_.Join(absl::StrCat("logs/gpu", gpu, ".log"))), text)) {
        return true;
      }
      agent_->RunOnce(absl::Milliseconds(50));
    }
    return false;
  }
  // Runs the loop until the server of `gpu` is in `state`, or 20 s of real time pass.
  bool RunUntilState(int gpu, const std::string& state) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (StatusOf(gpu).state() == state) return true;
      agent_->RunOnce(absl::Milliseconds(50));
    }
    return false;
  }

  std::vector<fleet::v1::AgentEvent> Events() {
    return agent_->EventsAfter(agent_->incarnation(), 0, 10000);
  }

  GpuWorld& world() { return world_; }
  std::string StateDir() const { return dir_.Join("state"); }
  GpuGuard& guard() { return *guard_; }
  fleet::testing::FakeClock& clock() { return clock_; }
  Agent& agent() { return *agent_; }

 private:
  fleet::testing::TempDir dir_;
  GpuWorld world_;
  fleet::testing::FakeClock clock_;
  PosixProcessLauncher launcher_;
  NeverReady prober_;
  PosixCommandRunner runner_;
  std::unique_ptr<GpuGuard> guard_;
  std::unique_ptr<Agent> agent_;
};

// The process's environment with a NUL before each entry: "\0NAME=VALUE\0" finds any of them.
std::string Environ(pid_t pid) {
  return std::string(1, '\0') + fleet::testing::ReadFile(absl::StrCat("/proc/", pid, "/environ"));
}

TEST(AgentGpu, LaunchedEnvironmentCarriesPciBusOrderWithTheConfiguredIndex) {
  AgentWithGuard a(/*with_guard=*/false);
  fleet::v1::ServerSpec spec = a.Spec(1, {"quiet"});
  // A template's own values would make the index mean another GPU: replaced.
  (*spec.mutable_env())["CUDA_DEVICE_ORDER"] = "FASTEST_FIRST";
  (*spec.mutable_env())["CUDA_VISIBLE_DEVICES"] = "0";
  auto r = a.Launch(spec, "a1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->status().pid(), 0);
  // Its first output: it runs the program now (its environment is readable).
  ASSERT_TRUE(a.RunUntilLog(1, "loading"));
  const std::string environ = Environ(r->status().pid());
  EXPECT_THAT(environ, HasSubstr(std::string("\0CUDA_DEVICE_ORDER=PCI_BUS_ID\0", 30)));
  EXPECT_THAT(environ, HasSubstr(std::string("\0CUDA_VISIBLE_DEVICES=1\0", 24)));
  EXPECT_THAT(environ, Not(HasSubstr("FASTEST_FIRST")));
}

TEST(AgentGpu, LaunchWaitsForABusyGpuSaysWhoHoldsItAndStartsOnceFreed) {
  AgentWithGuard a(/*with_guard=*/true);
  Reaper reaper;
  const pid_t holder = a.world().Busy(&reaper, 0, 70000);

  auto r = a.Launch(a.Spec(0, {"quiet"}), "a1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status().state(), "STARTING");
  EXPECT_EQ(r->status().pid(), 0) << "nothing runs before the GPU is checked";

  a.guard().Step();
  fleet::v1::ServerStatus s = a.StatusOf(0);
  EXPECT_EQ(s.state(), "STARTING");
  EXPECT_EQ(s.pid(), 0);
  EXPECT_THAT(s.phase_detail(), HasSubstr("waiting for gpu 0 to be free"));
  EXPECT_THAT(s.phase_detail(), HasSubstr(absl::StrCat("held by pid ", holder)));
  bool event = false;
  for (const fleet::v1::AgentEvent& e : a.Events()) {
    event = event || (e.attempt_id() == "a1" && e.has_phase() &&
                      absl::StrContains(e.phase().detail(), absl::StrCat("pid ", holder)));
  }
  EXPECT_TRUE(event) << "the daemon is told who holds the GPU";
  // A repeat of the launch is the same attempt, still waiting.
  auto again = a.Launch(a.Spec(0, {"quiet"}), "a1", 1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_running());

  Finish(holder);
  a.clock().Advance(absl::Seconds(2));
  a.guard().Step();
  s = a.StatusOf(0);
  EXPECT_GT(s.pid(), 0) << "launched once the memory was freed";
  EXPECT_EQ(s.attempt_id(), "a1");
  EXPECT_TRUE(a.RunUntilLog(0, "loading"));
}

TEST(AgentGpu, ATensorParallelServerGetsAllItsGpusAndWaitsForEachToBeFree) {
  AgentWithGuard a(/*with_guard=*/true);
  Reaper reaper;
  const pid_t holder = a.world().Busy(&reaper, 1, 70000);

  fleet::v1::ServerSpec spec = a.Spec(0, {"quiet"});
  spec.add_gpus(0);
  spec.add_gpus(1);
  auto r = a.Launch(spec, "a1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status().pid(), 0) << "GPU 1 is busy: nothing runs";
  EXPECT_THAT(a.StatusOf(0).phase_detail(), HasSubstr("waiting for gpus 0,1 to be free"));
  EXPECT_THAT(a.StatusOf(0).phase_detail(), HasSubstr("gpu 1: 70001 MiB used"));

  Finish(holder);
  a.clock().Advance(absl::Seconds(2));
  a.guard().Step();
  const fleet::v1::ServerStatus s = a.StatusOf(0);
  ASSERT_GT(s.pid(), 0) << "launched once GPU 1 was freed";
  ASSERT_TRUE(a.RunUntilLog(0, "loading"));
  EXPECT_THAT(Environ(s.pid()), HasSubstr(std::string("\0CUDA_VISIBLE_DEVICES=0,1\0", 26)));
}

TEST(AgentGpu, ALaunchWhoseGpusDoNotStartWithItsLeadIsRefused) {
  AgentWithGuard a(/*with_guard=*/false);
  fleet::v1::ServerSpec spec = a.Spec(0, {"quiet"});
  spec.add_gpus(1);
  spec.add_gpus(0);
  auto r = a.Launch(spec, "a1", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("must start with spec.server.gpu"));
  spec.clear_gpus();
  spec.add_gpus(0);
  spec.add_gpus(0);
  r = a.Launch(spec, "a1", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("a repeated GPU 0"));
  EXPECT_EQ(a.StatusOf(0).pid(), 0) << "nothing was started";
}

TEST(AgentGpu, GpuBusyPastTheWaitFailsTheAttemptNamingTheHolder) {
  AgentWithGuard a(/*with_guard=*/true);
  Reaper reaper;
  const pid_t holder = a.world().Busy(&reaper, 0, 70000);
  ASSERT_TRUE(a.Launch(a.Spec(0, {"quiet"}), "a1", 1).ok());
  a.guard().Step();
  a.clock().Advance(absl::Seconds(61));
  a.guard().Step();
  const fleet::v1::ServerStatus s = a.StatusOf(0);
  EXPECT_EQ(s.state(), "FAILED");
  EXPECT_EQ(s.pid(), 0);
  EXPECT_EQ(s.diagnosis().diagnosis_class(), "cuda_out_of_memory");
  EXPECT_THAT(s.diagnosis().summary(), HasSubstr("not launched: gpu 0 still busy"));
  EXPECT_THAT(s.diagnosis().summary(), HasSubstr(absl::StrCat("held by pid ", holder)));
  // Another attempt may come now.
  Finish(holder);
  auto next = a.Launch(a.Spec(0, {"quiet"}), "a2", 2);
  ASSERT_TRUE(next.ok()) << next.status();
  a.guard().Step();
  EXPECT_GT(a.StatusOf(0).pid(), 0);
}

TEST(AgentGpu, StopWhileWaitingEndsTheAttemptWithoutLaunching) {
  AgentWithGuard a(/*with_guard=*/true);
  Reaper reaper;
  const pid_t holder = a.world().Busy(&reaper, 0, 70000);
  ASSERT_TRUE(a.Launch(a.Spec(0, {"quiet"}), "a1", 1).ok());
  a.guard().Step();
  fleet::v1::StopRequest stop;
  stop.mutable_server()->set_gpu(0);
  ASSERT_TRUE(a.agent().Stop(stop).ok());
  EXPECT_EQ(a.StatusOf(0).state(), "STOPPED");
  Finish(holder);
  a.clock().Advance(absl::Seconds(2));
  EXPECT_EQ(a.guard().Step(), absl::InfiniteFuture()) << "the wait was cancelled";
  EXPECT_EQ(a.StatusOf(0).pid(), 0);
}

TEST(AgentGpu, AnAgentRestartedWhileALaunchWaitsKeepsWaitingThenLaunches) {
  AgentWithGuard a(/*with_guard=*/true);
  Reaper reaper;
  const pid_t holder = a.world().Busy(&reaper, 0, 70000);
  ASSERT_TRUE(a.Launch(a.Spec(0, {"quiet"}), "a1", 1).ok());
  EXPECT_EQ(a.StatusOf(0).pid(), 0);

  a.Restart();
  fleet::v1::ServerStatus s = a.StatusOf(0);
  EXPECT_EQ(s.attempt_id(), "a1");
  EXPECT_EQ(s.state(), "STARTING");
  EXPECT_EQ(s.pid(), 0) << "not launched, and not taken for a dead server";
  a.guard().Step();
  EXPECT_THAT(a.StatusOf(0).phase_detail(), HasSubstr(absl::StrCat("held by pid ", holder)));

  Finish(holder);
  a.clock().Advance(absl::Seconds(2));
  a.guard().Step();
  s = a.StatusOf(0);
  EXPECT_EQ(s.attempt_id(), "a1");
  EXPECT_GT(s.pid(), 0);
  EXPECT_TRUE(a.RunUntilLog(0, "loading"));
}

TEST(AgentGpu, RelaunchKillsOnlyTheLeftoverOfItsOwnServer) {
  BecomeSubreaper();
  AgentWithGuard a(/*with_guard=*/true);
  const std::string device = a.world().Device(0);
  ASSERT_TRUE(a.Launch(a.Spec(0, {"leftover", device}), "a1", 1).ok());
  a.guard().Step();
  const pid_t server = a.StatusOf(0).pid();
  ASSERT_GT(server, 0);
  ASSERT_TRUE(a.RunUntilLog(0, "leftover "));
  pid_t leftover = 0;
  for (const SessionProcess& p : ListSession(server)) {
    if (p.stat.pid != server) leftover = p.stat.pid;
  }
  ASSERT_GT(leftover, 0);
  Reaper reaper;
  reaper.Add(leftover);
  const uint64_t leftover_ticks = StartTicks(leftover);
  const pid_t bystander = reaper.Add(HoldOpen(device));
  const uint64_t bystander_ticks = StartTicks(bystander);

  // The server dies; its child, in a process group of its own, outlives the group's kill.
  kill(server, SIGKILL);
  ASSERT_TRUE(a.RunUntilState(0, "FAILED"));
  ASSERT_TRUE(Alive(leftover, leftover_ticks));

  ASSERT_TRUE(a.Launch(a.Spec(0, {"quiet"}), "a2", 2).ok());
  a.guard().Step();
  EXPECT_FALSE(Alive(leftover, leftover_ticks)) << "the server's own leftover is killed";
  EXPECT_TRUE(Reaped(leftover));
  EXPECT_TRUE(Alive(bystander, bystander_ticks)) << "another session's holder is left alone";
  const fleet::v1::ServerStatus s = a.StatusOf(0);
  EXPECT_EQ(s.attempt_id(), "a2");
  EXPECT_GT(s.pid(), 0);
  Finish(bystander);
}

TEST(AgentGpu, ServersCarryTheAgentsMarks) {
  AgentWithGuard a(/*with_guard=*/false);
  auto r = a.Launch(a.Spec(1, {"quiet"}), "a1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->status().pid(), 0);
  // Its first output: it runs the program now (its environment is readable).
  ASSERT_TRUE(a.RunUntilLog(1, "loading"));
  const std::string environ = Environ(r->status().pid());
  char resolved[PATH_MAX];
  ASSERT_NE(realpath(a.StateDir().c_str(), resolved), nullptr);
  struct stat root {};
  ASSERT_EQ(stat("/", &root), 0);
  EXPECT_THAT(environ,
              HasSubstr(absl::StrCat(std::string(1, '\0'), kMarkAgent, "=", resolved, "@",
                                     root.st_dev, ":", root.st_ino, std::string(1, '\0'))));
  EXPECT_THAT(environ, HasSubstr(absl::StrCat(std::string(1, '\0'), kMarkServer,
                                              "=local/local/gpu1", std::string(1, '\0'))));
  EXPECT_THAT(environ, HasSubstr(absl::StrCat(std::string(1, '\0'), kMarkAttempt, "=a1",
                                              std::string(1, '\0'))));
}

// The fault matrix's agent-wipe row: the agent's state dir deleted while its servers run. The new
// agent knows none of them; its relaunch finds them by their marks and stops them first, instead
// of waiting for a GPU (and a port) they hold until its wait runs out.
TEST(AgentGpu, AfterItsStateDirIsWipedTheRelaunchStopsTheServerItLost) {
  BecomeSubreaper();
  AgentWithGuard a(/*with_guard=*/true);
  ASSERT_TRUE(a.Launch(a.Spec(0, {"quiet"}), "a1", 1).ok());
  a.guard().Step();
  const pid_t old_server = a.StatusOf(0).pid();
  ASSERT_GT(old_server, 0);
  Reaper reaper;
  reaper.Add(old_server);
  const uint64_t old_ticks = StartTicks(old_server);
  a.world().HoldMemory(0, old_server, 70000, "python3");
  const pid_t bystander = reaper.Add(HoldOpen(a.world().Device(0)));
  const uint64_t bystander_ticks = StartTicks(bystander);

  a.Restart(/*wipe=*/true);
  EXPECT_EQ(a.StatusOf(0).attempt_id(), "") << "the record is gone";
  ASSERT_TRUE(Alive(old_server, old_ticks));
  ASSERT_TRUE(a.Launch(a.Spec(0, {"quiet"}), "b1", 1).ok());
  a.guard().Step();
  EXPECT_FALSE(Alive(old_server, old_ticks)) << "the server the agent lost is stopped";
  const fleet::v1::ServerStatus s = a.StatusOf(0);
  EXPECT_EQ(s.attempt_id(), "b1");
  EXPECT_GT(s.pid(), 0) << s.phase_detail();
  EXPECT_NE(s.pid(), old_server);
  EXPECT_TRUE(Alive(bystander, bystander_ticks)) << "an unmarked holder is left alone";
  Finish(bystander);
}

}  // namespace
}  // namespace fleet::agent

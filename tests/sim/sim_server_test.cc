// The simulated SGLang server against the real diagnosis engine: for each problem of the seed
// cascade (docs/design.md), a world with exactly that problem fails the way the real stack does
// and is classified as such; the fixed world serves HTTP; negatives and injected faults fail as
// their real counterparts. Every test builds its own world in its own temp dir and runs the
// simulator fast (FLEET_SIM_SPEED=500); waits are on log conditions and process exits, never fixed
// sleeps.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::sim::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr char kReadyLine[] = "The server is fired up and ready to roll!";
constexpr char kSigquitLine[] =
    "Received sigquit from a child process. It usually means the child failed.";
constexpr auto kRunTimeout = 60s;

class SimServerTest : public ::testing::Test {
 protected:
  SimWorld MakeWorld(const std::string& state, const std::vector<std::string>& breaks = {}) {
    absl::StatusOr<SimWorld> world = SimWorld::Create(tmp_.Join("world"), state, breaks);
    if (!world.ok()) ADD_FAILURE() << world.status();
    return *std::move(world);
  }

  // A port that was free a moment ago.
  int Port() {
    absl::StatusOr<int> port = FreePort();
    EXPECT_TRUE(port.ok()) << port.status();
    return port.ok() ? *port : 1;
  }

  std::string LogPath() { return tmp_.Join(absl::StrCat("server.", ++logs_, ".log")); }

  // Runs the server to its end; returns the exit and leaves the log at *log.
  ExitInfo RunToEnd(const std::vector<std::string>& argv, const Env& env, std::string* log) {
    *log = LogPath();
    absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
        BackgroundProcess::Start(argv, env, *log);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return {};
    absl::StatusOr<ExitInfo> exit = (*server)->Wait(kRunTimeout);
    EXPECT_TRUE(exit.ok()) << exit.status() << "\n" << (*server)->Log();
    EXPECT_FALSE((*server)->GroupAlive()) << "a scheduler outlived the server";
    return exit.ok() ? *exit : ExitInfo{};
  }

  ExitInfo RunWorld(const SimWorld& world, std::string* log, const Env& extra = {}) {
    Env env = world.ServerEnv();
    for (const auto& [k, v] : extra) env[k] = v;
    return RunToEnd(world.ServerArgv(Port()), env, log);
  }

  fleet::diagnosis::Diagnosis Diagnose(const std::string& log) {
    absl::StatusOr<fleet::diagnosis::Diagnosis> d = Classify(log);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : fleet::diagnosis::Diagnosis{};
  }

  fleet::testing::TempDir tmp_;
  int logs_ = 0;
};

// --- The seed cascade, one problem at a time ----------------------------------------------------

struct SeedProblem {
  std::string broken;  // make_sim_world.sh --break
  std::string diagnosis_class;
  int exit_code;  // the sigquit path exits 0, as SGLang's can
  std::string fact_key;
  std::string fact_value;
};

void PrintTo(const SeedProblem& p, std::ostream* os) { *os << p.broken; }

class SeedProblemTest : public SimServerTest, public ::testing::WithParamInterface<SeedProblem> {};

TEST_P(SeedProblemTest, FailsAsTheRealStackAndIsDiagnosed) {
  const SeedProblem& p = GetParam();
  SimWorld world = MakeWorld("fixed", {p.broken});
  std::string log;
  const ExitInfo exit = RunWorld(world, &log);

  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, p.exit_code);
  const std::string text = fleet::testing::ReadFile(log);
  EXPECT_THAT(text, Not(HasSubstr(kReadyLine)));
  if (p.exit_code == 0) {
    // The scheduler's traceback comes first, then the launcher's sigquit line ends the log.
    EXPECT_THAT(text, HasSubstr("Scheduler hit an exception: Traceback"));
    EXPECT_LT(text.find("Scheduler hit an exception"), text.find(kSigquitLine));
    EXPECT_EQ(text.find(kSigquitLine) + std::string(kSigquitLine).size() + 1, text.size());
  }
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, p.diagnosis_class) << d.summary << "\n" << text;
  EXPECT_TRUE(d.toolchain_fix);
  EXPECT_TRUE(p.fact_value.empty() ? d.facts.Has(p.fact_key)
                                   : HasFact(d.facts, p.fact_key, p.fact_value))
      << p.fact_key << "=" << p.fact_value << " missing\n"
      << text;
}

INSTANTIATE_TEST_SUITE_P(
    SeedOrder, SeedProblemTest,
    ::testing::Values(SeedProblem{"loader_path", "missing_shared_library", 1, "library",
                                  "libnvrtc.so.13"},
                      SeedProblem{"nvcc", "nvcc_not_found", 0, "nvcc_path", ""},
                      SeedProblem{"ninja", "ninja_not_found", 0, "jit_op", ""},
                      SeedProblem{"headers", "cuda_header_mismatch", 0, "gpu_arch", "sm_120a"},
                      SeedProblem{"ptxas", "ptx_version_unsupported", 0, "ptx_supported", "9.0"},
                      SeedProblem{"link_stub", "link_error", 0, "link_library", "-lcuda"}),
    [](const ::testing::TestParamInfo<SeedProblem>& param_info) {
      return param_info.param.broken;
    });

// Facts whose value depends on the world's path are checked here.
TEST_F(SimServerTest, MissingNvccUnderCudaHomeNamesThePath) {
  SimWorld world = MakeWorld("fixed", {"nvcc"});
  std::string log;
  RunWorld(world, &log);
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, "nvcc_not_found");
  EXPECT_TRUE(HasFact(d.facts, "nvcc_path", world.CudaDir() + "/bin/nvcc"));
}

TEST_F(SimServerTest, PtxFailureNamesWantedAndSupportedIsa) {
  SimWorld world = MakeWorld("fixed", {"ptxas"});
  std::string log;
  RunWorld(world, &log);
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported");
  EXPECT_TRUE(HasFact(d.facts, "ptx_wanted", "9.2"));
  EXPECT_TRUE(HasFact(d.facts, "ptx_supported", "9.0"));
  EXPECT_THAT(fleet::testing::ReadFile(log),
              HasSubstr("ptxas fatal   : Unsupported .version 9.2; current version is '9.0'"));
}

// The seed world fixed the way the remediation planner will (pip/apt shims, env), each fix
// uncovering the next problem in the seed's order; the catch-22 of 4 and 5 shown on the way.
TEST_F(SimServerTest, SeedWorldFailsInSeedOrderUntilEveryFixIsApplied) {
  SimWorld world = MakeWorld("seed");
  Env env = world.ServerEnv();
  const std::string cuda = world.CudaDir();
  std::string log;
  auto next_class = [&]() {
    const ExitInfo exit = RunToEnd(world.ServerArgv(Port()), env, &log);
    EXPECT_TRUE(exit.exited);
    return Diagnose(log).diagnosis_class;
  };
  auto pip = [&](const std::vector<std::string>& args) {
    absl::StatusOr<fleet::testing::RunResult> r = world.Pip(args);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << r->output;
  };

  EXPECT_EQ(next_class(), "missing_shared_library");
  env["LD_LIBRARY_PATH"] = cuda + "/lib";
  EXPECT_EQ(next_class(), "nvcc_not_found");
  EXPECT_THAT(fleet::testing::ReadFile(log),
              HasSubstr("Could not find nvcc and default cuda_home='/usr/local/cuda'"));
  pip({"install", "nvidia-cuda-nvcc==13.0.88"});
  env["CUDA_HOME"] = cuda;
  env["PATH"] = cuda + "/bin:" + env["PATH"];
  EXPECT_EQ(next_class(), "ninja_not_found");
  absl::StatusOr<fleet::testing::RunResult> apt = world.AptGet({"install", "-y", "ninja-build"});
  ASSERT_TRUE(apt.ok() && apt->exit_code == 0) << apt->output;
  // nvcc 13.0 matches the 13.0 headers but its ptxas cannot take PTX 9.2 ...
  EXPECT_EQ(next_class(), "ptx_version_unsupported");
  // ... and nvcc 13.2 alone trips over the 13.0 headers: fixed one constraint at a time, 4 and 5
  // alternate.
  pip({"install", "nvidia-cuda-nvcc==13.2.78"});
  EXPECT_EQ(next_class(), "cuda_header_mismatch");
  pip({"install", "nvidia-cuda-nvcc==13.2.78", "nvidia-cuda-crt==13.2.78", "nvidia-nvvm==13.2.78",
       "nvidia-cuda-runtime==13.2.75", "nvidia-cuda-nvrtc==13.2.78", "nvidia-cuda-cupti==13.2.75"});
  EXPECT_EQ(next_class(), "link_error");
  // The link layout: lib64, unversioned libcudart.so, a libcuda stub (the driver's library).
  ASSERT_EQ(symlink("lib", (cuda + "/lib64").c_str()), 0);
  ASSERT_EQ(symlink("libcudart.so.13", (cuda + "/lib/libcudart.so").c_str()), 0);
  ASSERT_EQ(mkdir((cuda + "/lib/stubs").c_str(), 0755), 0);
  ASSERT_EQ(symlink(world.Path("usr/lib/x86_64-linux-gnu/libcuda.so.1").c_str(),
                    (cuda + "/lib/stubs/libcuda.so").c_str()),
            0);
  absl::StatusOr<int> port = FreePort();
  ASSERT_TRUE(port.ok());
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(world.ServerArgv(*port), env, LogPath());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(
      (*server)
          ->WaitForLog([](const std::string& l) { return l.find(kReadyLine) != std::string::npos; },
                       30s)
          .ok())
      << (*server)->Log();
}

// --- The fixed world serves
// -----------------------------------------------------------------------

TEST_F(SimServerTest, FixedWorldServesHttpAndShutsDownOnSigterm) {
  SimWorld world = MakeWorld("fixed");
  absl::StatusOr<int> port = FreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(world.ServerArgv(*port), world.ServerEnv(), LogPath());
  ASSERT_TRUE(server.ok()) << server.status();
  BackgroundProcess& s = **server;
  ASSERT_TRUE(
      s.WaitForLog([](const std::string& l) { return l.find(kReadyLine) != std::string::npos; },
                   30s)
          .ok())
      << s.Log();

  absl::StatusOr<HttpReply> health = HttpRequest(*port, "GET", "/health_generate");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  EXPECT_FALSE(health->body.empty());
  absl::StatusOr<HttpReply> plain = HttpRequest(*port, "GET", "/health");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->status, 200);
  absl::StatusOr<HttpReply> info = HttpRequest(*port, "GET", "/get_model_info");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status, 200);
  EXPECT_THAT(info->body, HasSubstr("\"model_path\":\"" + world.Model() + "\""));
  absl::StatusOr<HttpReply> models = HttpRequest(*port, "GET", "/v1/models");
  ASSERT_TRUE(models.ok());
  EXPECT_THAT(models->body, HasSubstr("\"object\":\"list\""));
  absl::StatusOr<HttpReply> completion = HttpRequest(
      *port, "POST", "/v1/completions", R"({"prompt":"The capital of France is","max_tokens":2})");
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ(completion->status, 200);
  EXPECT_THAT(completion->body, AllOf(HasSubstr("\"choices\""), HasSubstr("\"text_completion\"")));
  absl::StatusOr<HttpReply> missing = HttpRequest(*port, "GET", "/nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(s.Log(), HasSubstr("\"GET /health_generate HTTP/1.1\" 200 OK"));

  absl::StatusOr<ExitInfo> exit = s.Stop(SIGTERM, 10s);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited);
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_FALSE(s.GroupAlive()) << "a scheduler outlived the server";
  EXPECT_THAT(s.Log(), HasSubstr("INFO:     Finished server process"));
  EXPECT_EQ(Diagnose(s.log_path()).diagnosis_class, "none");
}

// What the world's nvidia-smi prints for `args` (its driver's view of the GPUs).
std::string NvidiaSmi(const SimWorld& world, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {world.Path("bin/nvidia-smi")};
  argv.insert(argv.end(), args.begin(), args.end());
  fleet::testing::RunOptions options;
  options.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}};
  options.output_path = world.Path(absl::StrCat("smi.", getpid(), ".out"));
  absl::StatusOr<fleet::testing::RunResult> r = fleet::testing::Run(argv, options);
  EXPECT_TRUE(r.ok() && r->exited && r->exit_code == 0) << (r.ok() ? r->output : "");
  const std::string out = r.ok() ? r->output : "";
  unlink(options.output_path.c_str());
  return out;
}

int64_t MemoryUsed(const SimWorld& world, int gpu) {
  int64_t used = -1;
  const std::string out = NvidiaSmi(
      world, {"--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", absl::StrCat(gpu)});
  EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &used)) << out;
  return used;
}

TEST_F(SimServerTest, NvidiaSmiReportsTheServersGpuMemoryWhileItsSchedulerLives) {
  SimWorld world = MakeWorld("fixed");
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(world.ServerArgv(Port()), world.ServerEnv(/*gpu=*/3), LogPath());
  ASSERT_TRUE(server.ok()) << server.status();
  BackgroundProcess& s = **server;
  EXPECT_EQ(MemoryUsed(world, 3), 1) << "an idle GPU";
  ASSERT_TRUE(
      s.WaitForLog([](const std::string& l) { return l.find(kReadyLine) != std::string::npos; },
                   30s)
          .ok())
      << s.Log();
  EXPECT_GT(MemoryUsed(world, 3), 1024) << "the weights and the KV cache";
  EXPECT_EQ(MemoryUsed(world, 0), 1) << "another GPU";
  const std::string apps = NvidiaSmi(world, {"--query-compute-apps=pid,process_name,used_memory",
                                             "--format=csv,noheader,nounits", "-i", "3"});
  std::vector<std::string> fields = absl::StrSplit(absl::StripAsciiWhitespace(apps), ", ");
  ASSERT_EQ(fields.size(), 3u) << apps;
  int64_t holder = 0;
  ASSERT_TRUE(absl::SimpleAtoi(fields[0], &holder));
  EXPECT_NE(holder, s.pid()) << "the scheduler child holds the memory, not the launcher";
  EXPECT_EQ(getpgid(static_cast<pid_t>(holder)), s.pid());

  ASSERT_TRUE(s.Stop(SIGTERM, 10s).ok());
  EXPECT_EQ(MemoryUsed(world, 3), 1) << "freed with the process";
}

TEST_F(SimServerTest, LeftoverFaultKeepsTheSchedulerAndItsMemoryAfterTheLauncherIsKilled) {
  SimWorld world = MakeWorld("fixed");
  Env env = world.ServerEnv(/*gpu=*/1);
  env["FLEET_SIM_FAULT"] = "leftover";
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(world.ServerArgv(Port()), env, LogPath());
  ASSERT_TRUE(server.ok()) << server.status();
  BackgroundProcess& s = **server;
  ASSERT_TRUE(
      s.WaitForLog([](const std::string& l) { return l.find(kReadyLine) != std::string::npos; },
                   30s)
          .ok())
      << s.Log();
  const std::string apps =
      NvidiaSmi(world, {"--query-compute-apps=pid", "--format=csv,noheader,nounits", "-i", "1"});
  int64_t scheduler = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(apps), &scheduler)) << apps;
  const pid_t pid = static_cast<pid_t>(scheduler);
  EXPECT_EQ(getsid(pid), getsid(s.pid())) << "still in the server's session";
  EXPECT_EQ(getpgid(pid), pid) << "in a process group of its own";

  ASSERT_TRUE(s.Stop(SIGKILL, 10s).ok());
  EXPECT_EQ(kill(pid, 0), 0) << "the leftover outlives its launcher";
  EXPECT_GT(MemoryUsed(world, 1), 1024) << "and still holds the GPU's memory";
  EXPECT_TRUE(absl::StrContains(fleet::testing::ReadFile(absl::StrCat("/proc/", pid, "/cmdline")),
                                "sglang"))
      << "it is the server's own process";
  kill(pid, SIGKILL);
}

TEST_F(SimServerTest, SecondStartLoadsJitOpsFromTheCache) {
  SimWorld world = MakeWorld("fixed");
  for (int start = 1; start <= 2; ++start) {
    absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
        BackgroundProcess::Start(world.ServerArgv(Port()), world.ServerEnv(), LogPath());
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(
        (*server)
            ->WaitForLog(
                [](const std::string& l) { return l.find(kReadyLine) != std::string::npos; }, 30s)
            .ok());
    const std::string text = (*server)->Log();
    EXPECT_THAT(text, HasSubstr("Finished loading JIT ops: sampling"));
    if (start == 1) {
      EXPECT_THAT(text, HasSubstr("[3/3] c++ "));
    } else {
      EXPECT_THAT(text, Not(HasSubstr("[1/3]"))) << "the second start compiled again";
    }
    ASSERT_TRUE((*server)->Stop(SIGTERM, 10s).ok());
  }
}

TEST_F(SimServerTest, TensorParallelRanksLogInRankOrder) {
  SimWorld world = MakeWorld("fixed");
  std::vector<std::string> argv = world.ServerArgv(Port());
  argv.insert(argv.end(), {"--tp-size", "2"});
  Env env = world.ServerEnv();
  env["CUDA_VISIBLE_DEVICES"] = "2,3";
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(argv, env, LogPath());
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE(
      (*server)
          ->WaitForLog([](const std::string& l) { return l.find(kReadyLine) != std::string::npos; },
                       30s)
          .ok())
      << (*server)->Log();
  const std::string text = (*server)->Log();
  const size_t tp0 = text.find("TP0] Load weight begin");
  const size_t tp1 = text.find("TP1] Load weight begin");
  ASSERT_NE(tp0, std::string::npos);
  ASSERT_NE(tp1, std::string::npos);
  EXPECT_LT(tp0, tp1);
  EXPECT_LT(tp1, text.find("TP0] Load weight end"));
}

// --- Negatives: reported, never a toolchain change
// ------------------------------------------------

TEST_F(SimServerTest, PortInUseFailsLikeUvicorn) {
  SimWorld world = MakeWorld("fixed");
  absl::StatusOr<std::unique_ptr<HeldPort>> held = HeldPort::Listen();
  ASSERT_TRUE(held.ok()) << held.status();
  std::string log;
  const ExitInfo exit = RunToEnd(world.ServerArgv((*held)->port()), world.ServerEnv(), &log);
  EXPECT_TRUE(exit.exited);
  EXPECT_NE(exit.exit_code, 0);
  EXPECT_THAT(
      fleet::testing::ReadFile(log),
      HasSubstr(absl::StrCat("ERROR:    [Errno 98] error while attempting to bind on address "
                             "('127.0.0.1', ",
                             (*held)->port(), "): address already in use")));
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, "port_in_use");
  EXPECT_FALSE(d.toolchain_fix);
}

TEST_F(SimServerTest, ModelPathWithoutConfigIsModelNotFound) {
  SimWorld world = MakeWorld("fixed");
  std::vector<std::string> argv = world.ServerArgv(Port());
  argv[4] = "org/no-such-model";
  std::string log;
  const ExitInfo exit = RunToEnd(argv, world.ServerEnv(), &log);
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_THAT(fleet::testing::ReadFile(log),
              HasSubstr("org/no-such-model is not the path to a directory containing a file named "
                        "config.json"));
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, "model_not_found");
  EXPECT_FALSE(d.toolchain_fix);
}

TEST_F(SimServerTest, UnknownFlagIsAnArgparseError) {
  SimWorld world = MakeWorld("fixed");
  std::vector<std::string> argv = world.ServerArgv(Port());
  argv.push_back("--foo");
  std::string log;
  const ExitInfo exit = RunToEnd(argv, world.ServerEnv(), &log);
  EXPECT_EQ(exit.exit_code, 2);
  EXPECT_THAT(fleet::testing::ReadFile(log),
              HasSubstr("launch_server.py: error: unrecognized arguments: --foo"));
}

TEST_F(SimServerTest, WithoutNvidiaSmiTheDriverIsUnavailable) {
  SimWorld world = MakeWorld("fixed");
  Env env = world.ServerEnv();
  env["PATH"] = world.CudaDir() + "/bin";  // no world bin/: no nvidia-smi, as without a driver
  std::string log;
  const ExitInfo exit = RunToEnd(world.ServerArgv(Port()), env, &log);
  EXPECT_EQ(exit.exit_code, 0);
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, "gpu_driver_unavailable");
  EXPECT_FALSE(d.toolchain_fix);
}

struct FaultCase {
  std::string fault;
  std::string diagnosis_class;
};

void PrintTo(const FaultCase& f, std::ostream* os) { *os << f.fault; }

class FaultTest : public SimServerTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(FaultTest, IsReportedNotAToolchainProblem) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit = RunWorld(world, &log, {{"FLEET_SIM_FAULT", GetParam().fault}});
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, 0);  // the sigquit path
  EXPECT_THAT(fleet::testing::ReadFile(log), HasSubstr(kSigquitLine));
  const fleet::diagnosis::Diagnosis d = Diagnose(log);
  EXPECT_EQ(d.diagnosis_class, GetParam().diagnosis_class) << fleet::testing::ReadFile(log);
  EXPECT_FALSE(d.toolchain_fix);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultTest,
                         ::testing::Values(FaultCase{"oom", "cuda_out_of_memory"},
                                           FaultCase{"nccl", "nccl_error"},
                                           FaultCase{"watchdog", "runtime_watchdog"}),
                         [](const ::testing::TestParamInfo<FaultCase>& param_info) {
                           return param_info.param.fault;
                         });

TEST_F(SimServerTest, WatchdogFiresOnlyAfterTheServerWasReady) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  RunWorld(world, &log, {{"FLEET_SIM_FAULT", "watchdog"}});
  const std::string text = fleet::testing::ReadFile(log);
  ASSERT_NE(text.find(kReadyLine), std::string::npos);
  EXPECT_LT(text.find(kReadyLine), text.find("Watchdog timeout"));
}

TEST_F(SimServerTest, HungJitStepKeepsBurningCpuWithoutOutputUntilSigterm) {
  SimWorld world = MakeWorld("fixed");
  Env env = world.ServerEnv();
  env["FLEET_SIM_FAULT"] = "hang_jit";
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(world.ServerArgv(Port()), env, LogPath());
  ASSERT_TRUE(server.ok());
  BackgroundProcess& s = **server;
  ASSERT_TRUE(
      s.WaitForLog([](const std::string& l) { return l.find("[1/3] ") != std::string::npos; }, 30s)
          .ok())
      << s.Log();
  const std::string at_hang = s.Log();
  // The scheduler uses CPU while its log stays silent: a stall that only CPU time reveals.
  const double cpu_before = s.ChildrenCpuSeconds();
  EXPECT_TRUE(s.WaitUntil([&] { return s.ChildrenCpuSeconds() > cpu_before + 0.01; }, 20s).ok());
  EXPECT_EQ(s.Log(), at_hang);

  absl::StatusOr<ExitInfo> exit = s.Stop(SIGTERM, 10s);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_FALSE(s.GroupAlive()) << "the hung scheduler outlived the server";
  EXPECT_EQ(Diagnose(s.log_path()).diagnosis_class, "startup_stalled");
}

TEST_F(SimServerTest, SigtermDuringWeightLoadingEndsTheStartAtOnce) {
  SimWorld world = MakeWorld("fixed");
  Env env = world.ServerEnv(0, /*speed=*/5);  // weights take 2 s at speed 5
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
      BackgroundProcess::Start(world.ServerArgv(Port()), env, LogPath());
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE(
      (*server)
          ->WaitForLog(
              [](const std::string& l) { return l.find("Load weight begin") != std::string::npos; },
              30s)
          .ok());
  absl::StatusOr<ExitInfo> exit = (*server)->Stop(SIGTERM, 2s);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_FALSE((*server)->GroupAlive());
}

}  // namespace
}  // namespace fleet::sim::testing

// --- Ports for simulated servers
// ---------------------------------------------------------------------

// The fault matrix's servers once lost their ports to other tests' port-0 binds: a block from
// sim-free-ports lay in the ephemeral range. The block now lies outside it, and binds.
TEST(SimFreePorts, ABlockLiesOutsideTheEphemeralRangeAndBinds) {
  int low = 32768;
  int high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  fleet::testing::TempDir dir;
  absl::StatusOr<fleet::testing::RunResult> run =
      fleet::testing::Run({fleet::testing::BuildPath("tests/sim/sim-free-ports"), "8"},
                          {.output_path = dir.Join("ports")});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->output;
  std::vector<int> ports;
  for (absl::string_view line : absl::StrSplit(run->output, '\n', absl::SkipEmpty())) {
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(line, &port)) << line;
    ports.push_back(port);
  }
  ASSERT_EQ(ports.size(), 8u) << run->output;
  for (size_t i = 0; i < ports.size(); ++i) {
    EXPECT_EQ(ports[i], ports[0] + static_cast<int>(i)) << "not consecutive: " << run->output;
    EXPECT_TRUE(ports[i] < low || ports[i] > high)
        << ports[i] << " lies in the ephemeral range " << low << "-" << high;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(ports[i]));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << ports[i];
    close(fd);
  }
}

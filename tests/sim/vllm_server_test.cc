// The simulated vLLM server (`WORLD/venv/bin/vllm serve`): a fixed world passes the agent's own
// vLLM readiness check; broken toolchains fail with the same root-cause lines as the simulated
// SGLang server, in vLLM V1's shapes; with tensor parallelism the root cause is in one worker's
// traceback and the other worker shows a symptom; faults and negatives fail as vLLM does. Each
// test builds its own world; waits are on log lines and process exits, never fixed sleeps.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/http_readiness_prober.h"
#include "common/diagnosis/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/server_args.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::sim::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr char kStartupComplete[] = "INFO:     Application startup complete.";
constexpr char kEngineFailed[] =
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s)";
constexpr auto kVllmRunTimeout = 60s;

bool Holds(const std::string& log, const std::string& text) { return absl::StrContains(log, text); }

// The lines of `log` that start with `prefix` (a process's, "(Worker_TP1 pid=") and contain `text`.
int CountLines(const std::string& log, const std::string& prefix, const std::string& text) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StartsWith(line, prefix) && absl::StrContains(line, text)) ++n;
  }
  return n;
}

class VllmServerTest : public ::testing::Test {
 protected:
  SimWorld MakeWorld(const std::string& state, const std::vector<std::string>& breaks = {}) {
    absl::StatusOr<SimWorld> world = SimWorld::Create(tmp_.Join("world"), state, breaks);
    if (!world.ok()) ADD_FAILURE() << world.status();
    return *std::move(world);
  }

  int Port() {
    absl::StatusOr<int> port = FreePort();
    EXPECT_TRUE(port.ok()) << port.status();
    return port.ok() ? *port : 1;
  }

  std::string LogPath() { return tmp_.Join(absl::StrCat("server.", ++logs_, ".log")); }

  std::unique_ptr<BackgroundProcess> Start(const std::vector<std::string>& argv, const Env& env) {
    absl::StatusOr<std::unique_ptr<BackgroundProcess>> server =
        BackgroundProcess::Start(argv, env, LogPath());
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // Runs the server to its end; returns the exit and leaves the log in *log.
  ExitInfo RunToEnd(const std::vector<std::string>& argv, const Env& env, std::string* log) {
    std::unique_ptr<BackgroundProcess> server = Start(argv, env);
    if (server == nullptr) return {};
    absl::StatusOr<ExitInfo> exit = server->Wait(kVllmRunTimeout);
    EXPECT_TRUE(exit.ok()) << exit.status() << "\n" << server->Log();
    EXPECT_FALSE(server->GroupAlive()) << "an EngineCore or worker outlived the server";
    *log = server->Log();
    return exit.ok() ? *exit : ExitInfo{};
  }

  // `vllm serve` in `world` with `extra` flags and environment, to its end.
  ExitInfo RunVllm(const SimWorld& world, std::string* log,
                   const std::vector<std::string>& flags = {}, const Env& extra = {}) {
    std::vector<std::string> argv = world.VllmArgv(Port());
    argv.insert(argv.end(), flags.begin(), flags.end());
    Env env = world.ServerEnv();
    for (const auto& [k, v] : extra) env[k] = v;
    return RunToEnd(argv, env, log);
  }

  fleet::testing::TempDir tmp_;
  int logs_ = 0;
};

// --- The fixed world serves the agent's readiness check ---------------------------------------

TEST_F(VllmServerTest, FixedWorldPassesTheAgentsVllmReadinessCheck) {
  SimWorld world = MakeWorld("fixed");
  const int port = Port();
  std::unique_ptr<BackgroundProcess> server = Start(world.VllmArgv(port), world.ServerEnv());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(
      server->WaitForLog([](const std::string& l) { return Holds(l, kStartupComplete); }, 30s).ok())
      << server->Log();

  // Exactly what fleet-agent does for engine vllm (common/config: /health + a completion).
  agent::ReadinessCheck check;
  check.port = port;
  check.path = "/health";
  check.completion_check = true;
  check.timeout = absl::Seconds(5);
  const agent::ReadinessResult ready = agent::HttpReadinessProber().Check(check);
  EXPECT_TRUE(ready.ready) << ready.detail;
  EXPECT_EQ(ready.http_status, 200);

  absl::StatusOr<HttpReply> models = HttpRequest(port, "GET", "/v1/models");
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_THAT(models->body,
              AllOf(HasSubstr("\"object\":\"list\""), HasSubstr("\"id\":\"" + world.Model() + "\""),
                    HasSubstr("\"owned_by\":\"vllm\"")));
  absl::StatusOr<HttpReply> completion = HttpRequest(
      port, "POST", "/v1/completions",
      absl::StrCat(R"({"model":")", world.Model(), R"(","prompt":"Hi","max_tokens":1})"));
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ(completion->status, 200);
  EXPECT_THAT(completion->body, AllOf(HasSubstr("\"object\":\"text_completion\""),
                                      HasSubstr("\"completion_tokens\":1")));
  const std::string log = server->Log();
  EXPECT_THAT(log, HasSubstr("\"POST /v1/completions HTTP/1.1\" 200 OK"));
  // vLLM V1's shapes: the API server's and EngineCore's prefixes, KV cache and graphs.
  EXPECT_EQ(CountLines(log, absl::StrCat("(APIServer pid=", server->pid(), ") INFO "),
                       "vLLM API server version 0.11.0"),
            1);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=", "Initializing a V1 LLM engine (v0.11.0)"), 1);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=", "Available KV cache memory: "), 1);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=", "Graph capturing finished in "), 1);
  EXPECT_EQ(CountLines(log, "(APIServer pid=", "Starting vLLM API server 0 on http://127.0.0.1:"),
            1);

  absl::StatusOr<ExitInfo> exit = server->Stop(SIGTERM, 10s);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited);
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_FALSE(server->GroupAlive()) << "EngineCore outlived the server";
  EXPECT_THAT(server->Log(), HasSubstr("INFO:     Application shutdown complete."));
}

TEST_F(VllmServerTest, ServedModelNameIsTheModelIdAndOtherModelsAreNotFound) {
  SimWorld world = MakeWorld("fixed");
  const int port = Port();
  std::vector<std::string> argv = world.VllmArgv(port);
  argv.insert(argv.end(), {"--served-model-name", "tiny-chat"});
  std::unique_ptr<BackgroundProcess> server = Start(argv, world.ServerEnv());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(
      server->WaitForLog([](const std::string& l) { return Holds(l, kStartupComplete); }, 30s).ok())
      << server->Log();
  absl::StatusOr<HttpReply> models = HttpRequest(port, "GET", "/v1/models");
  ASSERT_TRUE(models.ok());
  EXPECT_THAT(models->body, HasSubstr("\"id\":\"tiny-chat\""));
  absl::StatusOr<HttpReply> other = HttpRequest(
      port, "POST", "/v1/completions", R"({"model":"other","prompt":"Hi","max_tokens":1})");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->status, 404);
  EXPECT_THAT(other->body, HasSubstr("The model `other` does not exist."));
}

TEST_F(VllmServerTest, NothingListensBeforeTheEngineIsUp) {
  SimWorld world = MakeWorld("fixed");
  const int port = Port();
  Env env = world.ServerEnv(0, /*speed=*/5);  // weights take seconds at speed 5
  std::unique_ptr<BackgroundProcess> server = Start(world.VllmArgv(port), env);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(
      server
          ->WaitForLog([](const std::string& l) { return Holds(l, "Starting to load model"); }, 30s)
          .ok())
      << server->Log();
  EXPECT_FALSE(HttpRequest(port, "GET", "/health").ok()) << "the port answered during loading";
  absl::StatusOr<ExitInfo> exit = server->Stop(SIGTERM, 5s);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_FALSE(server->GroupAlive());
}

// --- Broken toolchains: the SGLang simulator's root-cause lines, in vLLM's shapes ---------------

struct ToolchainCase {
  std::string broken;      // make_sim_world.sh --break
  std::string root_cause;  // a substring of the root-cause line both servers write
};

void PrintTo(const ToolchainCase& c, std::ostream* os) { *os << c.broken; }

class VllmToolchainTest : public VllmServerTest,
                          public ::testing::WithParamInterface<ToolchainCase> {};

// The line of `log` that contains `text` ("" when none).
std::string LineWith(const std::string& log, const std::string& text) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, text)) return std::string(line);
  }
  return "";
}

TEST_P(VllmToolchainTest, FailsWithTheSglangSimulatorsRootCauseLine) {
  const ToolchainCase& c = GetParam();
  SimWorld world = MakeWorld("fixed", {c.broken});
  // The SGLang simulator's line, from the same world (its JIT cache paths are the same).
  std::string sglang_log;
  RunToEnd(world.ServerArgv(Port()), world.ServerEnv(), &sglang_log);
  std::string root_cause = LineWith(sglang_log, c.root_cause);
  ASSERT_FALSE(root_cause.empty()) << sglang_log;
  // SGLang's logger decorates differently; compare what follows its prefix.
  if (root_cause.rfind("[", 0) == 0) root_cause = root_cause.substr(root_cause.find("] ") + 2);

  std::string log;
  const ExitInfo exit = RunVllm(world, &log);
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, 1) << "vLLM exits non-zero when EngineCore does not start";
  EXPECT_THAT(log, HasSubstr(root_cause));
  // The root cause is in EngineCore's traceback (one GPU: EngineCore runs it), then the API
  // server's RuntimeError ends the log.
  EXPECT_GT(CountLines(log, "(EngineCore_DP0 pid=", "ERROR "), 0);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=", "EngineCore failed to start."), 1);
  EXPECT_THAT(log, Not(HasSubstr(kStartupComplete)));
  EXPECT_EQ(CountLines(log, "(APIServer pid=", kEngineFailed), 1);
  EXPECT_LT(log.find("EngineCore failed to start."), log.find(kEngineFailed));
}

INSTANTIATE_TEST_SUITE_P(
    Broken, VllmToolchainTest,
    ::testing::Values(
        ToolchainCase{"nvcc", "FileNotFoundError: [Errno 2] No such file or directory: '"},
        ToolchainCase{"ninja", "No such file or directory: 'ninja'"},
        ToolchainCase{"headers", "CUDA compiler and CUDA toolkit headers are incompatible"},
        ToolchainCase{"ptxas",
                      "ptxas fatal   : Unsupported .version 9.2; current version is "
                      "'9.0'"},
        ToolchainCase{"link_stub", "/usr/bin/ld: cannot find -lcuda"}),
    [](const ::testing::TestParamInfo<ToolchainCase>& param_info) {
      return param_info.param.broken;
    });

TEST_F(VllmServerTest, SeedWorldFailsAtFlashinfersSearchForNvcc) {
  SimWorld world = MakeWorld("seed");
  std::string log;
  const ExitInfo exit = RunVllm(world, &log);
  EXPECT_EQ(exit.exit_code, 1);
  // vLLM does not import sgl_kernel: the loader path is not its problem; nvcc is the first one.
  EXPECT_THAT(log, Not(HasSubstr("libnvrtc.so.13")));
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' "
                       "doesn't exist"),
            2)
      << "the logger's record and the process's exit traceback\n"
      << log;
}

TEST_F(VllmServerTest, TritonAttentionNeedsNoJitToolchain) {
  SimWorld world = MakeWorld("fixed", {"ptxas"});
  std::unique_ptr<BackgroundProcess> server = [&] {
    Env env = world.ServerEnv();
    env["VLLM_ATTENTION_BACKEND"] = "TRITON_ATTN";
    return Start(world.VllmArgv(Port()), env);
  }();
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(
      server->WaitForLog([](const std::string& l) { return Holds(l, kStartupComplete); }, 30s).ok())
      << server->Log();
  EXPECT_THAT(server->Log(), AllOf(HasSubstr("Using Triton backend on V1 engine."),
                                   Not(HasSubstr("flashinfer.jit"))));
}

TEST_F(VllmServerTest, SecondStartLoadsFlashinfersOpsFromTheCache) {
  SimWorld world = MakeWorld("fixed");
  for (int start = 1; start <= 2; ++start) {
    std::unique_ptr<BackgroundProcess> server = Start(world.VllmArgv(Port()), world.ServerEnv());
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(
        server->WaitForLog([](const std::string& l) { return Holds(l, kStartupComplete); }, 30s)
            .ok())
        << server->Log();
    const std::string log = server->Log();
    EXPECT_THAT(log, HasSubstr("flashinfer.jit: Finished loading JIT ops: batch_prefill"));
    if (start == 1) {
      EXPECT_THAT(log, HasSubstr("[3/3] c++ "));
    } else {
      EXPECT_THAT(log, Not(HasSubstr("[1/3]"))) << "the second start compiled again";
    }
    ASSERT_TRUE(server->Stop(SIGTERM, 10s).ok());
  }
}

// --- Tensor parallelism: one worker's root cause, the others' symptoms ------------------------

TEST_F(VllmServerTest, TensorParallelJitFailureIsInOneWorkerAndTheOtherShowsASymptom) {
  SimWorld world = MakeWorld("fixed", {"ptxas"});
  std::string log;
  const ExitInfo exit =
      RunVllm(world, &log, {"--tensor-parallel-size", "2"}, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, 1);
  // The root cause: ptxas's line (ninja's output, undecorated) and one worker's traceback.
  EXPECT_THAT(log, HasSubstr("ptxas fatal   : Unsupported .version 9.2; current version is '9.0'"));
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "WorkerProc hit an exception."), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "RuntimeError: Ninja build failed."), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "Ninja build failed"), 0);
  // The other worker's symptom: its all-reduce lost its peer.
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "WorkerProc hit an exception."), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=",
                       "torch.distributed.DistBackendError: NCCL communicator was aborted on rank "
                       "1."),
            1);
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "NCCL communicator was aborted"), 0);
  // EngineCore names the first failed rank's error; the workers are told to exit.
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=", "EngineCore failed to start."), 1);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "RuntimeError: Worker failed with error 'Ninja build failed.', please "
                       "check the stack trace above for the root cause"),
            2);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "Parent process exited, terminating worker"), 1);
  EXPECT_EQ(CountLines(log, "(APIServer pid=", kEngineFailed), 1);
  // In order: root cause, symptom, EngineCore, the API server.
  EXPECT_LT(log.find("RuntimeError: Ninja build failed."),
            log.find("NCCL communicator was aborted"));
  EXPECT_LT(log.find("NCCL communicator was aborted"), log.find("EngineCore failed to start."));
  EXPECT_LT(log.find("EngineCore failed to start."), log.find(kEngineFailed));
  // The classifier names the worker's root cause, not the symptom nor EngineCore's quote.
  const diagnosis::Diagnosis d = diagnosis::ClassifyText(log);
  EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported") << d.summary;
}

TEST_F(VllmServerTest, TensorParallelSymptomIsInTheCollectiveTheRootCauseLeft) {
  // No ninja: the first step of the profile run fails in rank 0.
  SimWorld world = MakeWorld("fixed", {"ninja"});
  std::string log;
  const ExitInfo exit = RunVllm(world, &log, {"-tp", "2"}, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=",
                       "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"),
            1);
  // Rank 1 was in the same profile run, not in its device set-up.
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "in determine_available_memory"), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "in init_device"), 0);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "Worker failed with error '[Errno 2] No such file or directory: 'ninja''"),
            2);
}

TEST_F(VllmServerTest, TensorParallelCaptureFailureInTheLastRankLeavesEngineCoreNamingASymptom) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit =
      RunVllm(world, &log, {"--tensor-parallel-size", "2"},
              {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"FLEET_SIM_FAULT", "graph_capture"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=",
                       "torch.AcceleratorError: CUDA error: operation failed due to a previous "
                       "error during capture"),
            1);
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "NCCL communicator was aborted on rank 0."), 1);
  // collective_rpc reads rank 0 first: EngineCore's message is the symptom, not the root cause.
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "Worker failed with error 'NCCL communicator was aborted on rank 0.'"),
            2);
  // The classifier names rank 1's capture failure, not rank 0's symptom nor EngineCore's quote
  // of it.
  const diagnosis::Diagnosis d = diagnosis::ClassifyText(log);
  EXPECT_EQ(d.diagnosis_class, "cuda_graph_capture_failed") << d.summary;
}

TEST_F(VllmServerTest, TensorParallelNeedsAsManyVisibleGpusAsRanks) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit =
      RunVllm(world, &log, {"--tensor-parallel-size", "2"}, {{"CUDA_VISIBLE_DEVICES", "5"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "WorkerProc failed to start."), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "CUDA error: invalid device ordinal"), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "ERROR "), 0);
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "Parent process exited, terminating worker"), 1);
  // Named as a GPU the process cannot see, never a toolchain change.
  EXPECT_EQ(diagnosis::ClassifyText(log).signature_id, "cuda_invalid_device_ordinal");
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "Exception: WorkerProc initialization failed due to an exception in a "
                       "background process. See stack trace for root cause."),
            2);
  EXPECT_EQ(CountLines(log, "(APIServer pid=", kEngineFailed), 1);
}

TEST_F(VllmServerTest, TensorParallelFixedWorldServesWithOneWorkerPerGpu) {
  SimWorld world = MakeWorld("fixed");
  const int port = Port();
  std::vector<std::string> argv = world.VllmArgv(port);
  argv.insert(argv.end(), {"-tp", "2"});
  Env env = world.ServerEnv();
  env["CUDA_VISIBLE_DEVICES"] = "2,3";
  std::unique_ptr<BackgroundProcess> server = Start(argv, env);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(
      server->WaitForLog([](const std::string& l) { return Holds(l, kStartupComplete); }, 30s).ok())
      << server->Log();
  const std::string log = server->Log();
  EXPECT_EQ(CountLines(log, "(Worker_TP0 pid=", "Available KV cache memory"), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "Available KV cache memory"), 1);
  EXPECT_EQ(CountLines(log, "(Worker_TP1 pid=", "flashinfer.jit: Finished loading JIT ops"), 2);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=", "GPU KV cache size: "), 1);
  absl::StatusOr<HttpReply> health = HttpRequest(port, "GET", "/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  // Each worker holds its own GPU's memory in the world's driver record (nvidia-smi's source).
  for (int gpu : {2, 3}) {
    std::vector<std::string> holders;
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::directory_iterator(world.Path(absl::StrCat("run/gpu-mem/", gpu)), ec)) {
      holders.push_back(entry.path().filename().string());
    }
    ASSERT_EQ(holders.size(), 1u) << "GPU " << gpu;
    EXPECT_NE(holders[0], absl::StrCat(server->pid())) << "a worker holds it, not the API server";
  }
}

// --- Faults and negatives ----------------------------------------------------------------------

TEST_F(VllmServerTest, GraphCaptureFaultFailsAndEnforceEagerAvoidsIt) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  ExitInfo exit = RunVllm(world, &log, {}, {{"FLEET_SIM_FAULT", "graph_capture"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "torch.AcceleratorError: CUDA error: operation failed due to a previous "
                       "error during capture"),
            2);

  Env env = world.ServerEnv();
  env["FLEET_SIM_FAULT"] = "graph_capture";
  std::vector<std::string> argv = world.VllmArgv(Port());
  argv.push_back("--enforce-eager");
  std::unique_ptr<BackgroundProcess> server = Start(argv, env);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(
      server->WaitForLog([](const std::string& l) { return Holds(l, kStartupComplete); }, 30s).ok())
      << server->Log();
  EXPECT_THAT(server->Log(), AllOf(HasSubstr("enforce_eager=True"),
                                   HasSubstr("Cudagraph is disabled under eager mode"),
                                   Not(HasSubstr("Capturing CUDA graphs"))));
}

TEST_F(VllmServerTest, OomFaultLeavesNoMemoryForTheKvCache) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit = RunVllm(world, &log, {}, {{"FLEET_SIM_FAULT", "oom"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_THAT(log, HasSubstr("Available KV cache memory: -0.52 GiB"));
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "ValueError: No available memory for the cache blocks. Try increasing "
                       "`gpu_memory_utilization` when initializing the engine."),
            2);
  EXPECT_EQ(CountLines(log, "(APIServer pid=", kEngineFailed), 1);
}

TEST_F(VllmServerTest, FlashAttentionOnSm120IsNotValid) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit = RunVllm(world, &log, {}, {{"VLLM_ATTENTION_BACKEND", "FLASH_ATTN"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_EQ(CountLines(log, "(EngineCore_DP0 pid=",
                       "ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid "
                       "for this configuration. Reason: ['compute capability not supported']"),
            2);
  EXPECT_THAT(log, Not(HasSubstr("flashinfer.jit")));
}

TEST_F(VllmServerTest, UnknownAttentionBackendListsTheValidOnes) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit = RunVllm(world, &log, {}, {{"VLLM_ATTENTION_BACKEND", "FLASHY"}});
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_THAT(log, HasSubstr("ValueError: Invalid attention backend: 'FLASHY'. Valid backends are: "
                             "['FLASH_ATTN', 'TRITON_ATTN'"));
}

TEST_F(VllmServerTest, UnknownFlagIsVllmsArgparseError) {
  SimWorld world = MakeWorld("fixed");
  std::string log;
  const ExitInfo exit = RunVllm(world, &log, {"--foo", "1"});
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, 2);
  EXPECT_THAT(log, AllOf(HasSubstr("usage: vllm serve [model_tag] [options]"),
                         HasSubstr("vllm serve: error: unrecognized arguments: --foo 1")));
}

TEST_F(VllmServerTest, ModelWithoutConfigIsTransformersOsError) {
  SimWorld world = MakeWorld("fixed");
  std::vector<std::string> argv = world.VllmArgv(Port());
  argv[2] = "org/no-such-model";
  std::string log;
  const ExitInfo exit = RunToEnd(argv, world.ServerEnv(), &log);
  EXPECT_EQ(exit.exit_code, 1);
  EXPECT_THAT(log, HasSubstr("org/no-such-model is not the path to a directory containing a file "
                             "named config.json"));
  EXPECT_THAT(log, Not(HasSubstr("EngineCore_DP0")));
}

}  // namespace

TEST(VllmServeArgs, ParsesThePositionalModelAndVllmsFlags) {
  absl::StatusOr<ServerArgs> a = ParseVllmServeArgs(
      {"/m", "--port", "8001", "--tensor-parallel-size", "2", "--enforce-eager",
       "--gpu-memory-utilization", "0.8", "--max-model-len=2048", "--served-model-name", "m"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->model_path, "/m");
  EXPECT_EQ(a->port, 8001);
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->tp_size, 2);
  EXPECT_TRUE(a->disable_cuda_graph);
  EXPECT_DOUBLE_EQ(a->mem_fraction_static, 0.8);
  EXPECT_EQ(a->context_length, 2048);
  EXPECT_EQ(a->served_model_name, "m");
}

TEST(VllmServeArgs, RequiresTheModelAndRejectsBadValues) {
  absl::StatusOr<ServerArgs> none = ParseVllmServeArgs({"--port", "8001"});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("vllm serve: error: the following arguments are required: model_tag"));
  absl::StatusOr<ServerArgs> bad = ParseVllmServeArgs({"/m", "--max-model-len", "lots"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("vllm serve: error: argument --max-model-len: invalid int value: 'lots'"));
}

}  // namespace fleet::sim::testing

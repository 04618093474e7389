// The whole fleet of an end-to-end test (fleet_e2e_test, prometheus_e2e_test): a simulated
// container world (tests/sim/) in the test's own temp dir, the real fleet-agent for its container,
// the real fleetd on a state dir there, and fleetctl to drive them as a user would, with the JSON
// helpers that read fleetctl's `-o json`. Waits are on conditions with deadlines, never on sleeps.
//
// A Fleet belongs to one test and one thread; its destructor kills everything the fleet started.
// The helpers report failures through gtest (ADD_FAILURE, ASSERT_*): call them from a test body.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "proto/agent.grpc.pb.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::e2e {

// Generous: the lead also runs this under AddressSanitizer on two cores.
inline constexpr std::chrono::seconds kDeadline(60);
inline constexpr char kHost[] = "local";
inline constexpr char kCtid[] = "sim";

// Re-checks `holds` every 50 ms until it is true or `timeout` passed: for conditions that have
// no event to wait on (a row in fleetd's status, a process gone).
bool Eventually(const std::function<bool()>& holds, std::chrono::milliseconds timeout = kDeadline);

// The environment of fleetd, the agent and fleetctl: a plain PATH, plus the sanitizers' options
// of this run (a sanitizer build's ctest may set them) so they reach the binaries under test.
sim::testing::Env ToolEnv();

// fleetctl's `-o json`, read through protobuf's Struct (a failure to parse fails the test).
google::protobuf::Struct ParseJson(const std::string& text);
const google::protobuf::Value& Field(const google::protobuf::Struct& s, const std::string& key);
std::string Str(const google::protobuf::Struct& s, const std::string& key);
int64_t Int(const google::protobuf::Struct& s, const std::string& key);
std::vector<google::protobuf::Struct> Objects(const google::protobuf::Struct& s,
                                              const std::string& key);

// `s` as a double-quoted YAML scalar.
std::string Quoted(const std::string& s);

// The name fleetd gives the server on `gpu` of the fleet's one container.
std::string ServerName(int gpu);

struct CtlResult {
  sim::testing::ExitInfo exit;
  std::string output;  // stdout and stderr
  int code() const { return exit.exited ? exit.exit_code : 128 + exit.signal; }
};

struct WorldOptions {
  int gpus = 2;
  std::string state = "fixed";
  std::vector<std::string> breaks;
  double speed = 500;  // FLEET_SIM_SPEED: a cold start takes about 50 s / speed
  // The policy's remediation mode; "off" where a test is about the reconciler alone.
  std::string remediation = "off";
  bool canary = false;      // one GPU first while the JIT cache is cold (the seed scenario's)
  std::string policy_yaml;  // more lines of the default policy ("    key: value\n")
  std::map<std::string, std::string> env;  // more server environment (FLEET_SIM_FAULT, ...)
  std::string extra_yaml;  // more top-level sections of the config ("notify:\n  - ...")
  // The servers' engine: "sglang" (python -m sglang.launch_server) or "vllm" (vllm serve, the
  // world's simulated vLLM server; readiness /health and a one-token completion). Empty: the
  // suite's engine, FLEET_E2E_ENGINE (ctest runs the scenarios once per engine), else sglang.
  std::string engine;
  // Servers that span several GPUs (tensor parallel), each listed lead first: `servers:` in the
  // config, the template's argv given the engine's tensor-parallel flag set to {gpu_count}. The
  // other GPUs of 0..gpus-1 are one server each.
  std::vector<std::vector<int>> tensor_parallel;
};

// The seed scenario (docs/design.md): 8 GPUs of a container in the seed state, remediation auto,
// a canary while the JIT cache is cold, 3 attempts a server.
inline constexpr int kSeedGpus = 8;
WorldOptions SeedScenario();
// The seed scenario with the probe's test-compile off (policy preflight.test_compile: false): the
// PTX is learnt from the canary's failed start, 8 READY in 9 launches. The tests of what happens
// around that failure (a takeover at it, the alerts it fires) use this one.
WorldOptions SeedScenarioLearningFromTheCanary();

// One test's fleet: a simulated container world, its agent, fleetd, and fleetctl to drive them.
// The destructor kills all of it, the servers the agent started included (they live in sessions
// of their own, and outlive a killed agent on purpose).
class Fleet {
 public:
  explicit Fleet(WorldOptions options);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  bool ok() const { return world_.has_value() && base_port_ > 0; }
  const sim::testing::SimWorld& world() const { return *world_; }
  int port(int gpu) const { return base_port_ + gpu; }
  // A path inside the fleet's temp dir.
  std::string Join(const std::string& relative) const { return dir_.Join(relative); }
  std::string state_dir() const { return dir_.Join("state"); }
  std::string db_path() const { return dir_.Join("state/fleet.db"); }
  std::string log_path(int gpu) const;
  std::string agent_socket() const { return dir_.Join("agent.sock"); }
  // The servers' engine, "sglang" or "vllm" (WorldOptions.engine resolved).
  const std::string& engine() const { return options_.engine; }

  // The fleet config of this world: one local container whose agent listens on a unix socket,
  // the world's server (the simulated `python -m sglang.launch_server`) on each GPU. `more_env`
  // is more server environment, over the options' (a fault for a later deploy).
  std::string ConfigYaml(const std::map<std::string, std::string>& more_env = {}) const;

  // ConfigYaml() written to the fleet's fleet.yaml; its path.
  std::string WriteConfig() const;
  // The GPUs that name a server: all but the non-lead GPUs of options' tensor_parallel groups.
  std::vector<int> Leads() const;

  // The container's agent, on the unix socket of the config, serving once this returns.
  void StartAgent();
  void KillAgent();

  // fleetd on this fleet's state dir with `extra` flags, serving once this returns.
  void StartFleetd(const std::vector<std::string>& extra = {});
  void KillFleetd();
  // The port of fleetd's metrics server (started with --metrics-listen HOST:0), from the line
  // fleetd logs before it serves; 0 when its log has none.
  int MetricsPort() const;

  // `fleetctl --socket STATE_DIR/fleetd.sock ARGS...`, its stdout and stderr (not a terminal).
  CtlResult Ctl(const std::vector<std::string>& args,
                std::chrono::milliseconds timeout = kDeadline);
  CtlResult RunTool(const std::vector<std::string>& argv,
                    std::chrono::milliseconds timeout = kDeadline);

  // `fleetctl deploy -f` of WriteConfig(): exits 0 and names every server.
  void Deploy();
  // `fleetctl deploy -f FILE MORE...` of `yaml`, written to a file of its own.
  CtlResult DeployConfig(const std::string& yaml, const std::vector<std::string>& more = {});

  // The agent, fleetd, `fleetctl deploy`, and `fleetctl status --watch --until-ready` to its end.
  CtlResult StartDeployAndWatch();

  // `fleetctl status -o json`, its rows by server name.
  std::map<std::string, google::protobuf::Struct> Status();

  // Polls `fleetctl status -o json` until `holds(rows)`.
  bool StatusEventually(
      const std::function<bool(const std::map<std::string, google::protobuf::Struct>&)>& holds,
      std::chrono::milliseconds timeout = kDeadline);

  // `fleetctl attempts -o json`.
  std::vector<google::protobuf::Struct> Attempts();

  // What the agent runs, asked over its own gRPC socket (as fleetd does).
  v1::StatusResponse AgentStatus();

  // The agent's servers by GPU.
  std::map<int, v1::ServerStatus> AgentServers();

  // fleetd's and the agent's logs and each server's, for a failure's message.
  std::string Diagnostics();

  // SIGKILL to every process whose command line names `root` and to its process group: the
  // servers (session leaders) with their scheduler children. Only what this test started has its
  // temp dir on the command line.
  static void KillEverythingUnder(const std::string& root);

 private:
  const WorldOptions options_;
  testing::TempDir dir_;
  std::optional<sim::testing::SimWorld> world_;
  int base_port_ = 0;
  std::unique_ptr<sim::testing::BackgroundProcess> agent_;
  std::unique_ptr<sim::testing::BackgroundProcess> fleetd_;
  std::unique_ptr<v1::Agent::Stub> stub_;
  int agent_runs_ = 0;
  int fleetd_runs_ = 0;
  int tool_runs_ = 0;
  int configs_ = 0;
};

}  // namespace fleet::e2e

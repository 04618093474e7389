#include "tests/e2e/fleet.h"

#include <dirent.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/sim/port_pick.h"
#include "tests/testing/eventually.h"

namespace fleet::e2e {

using google::protobuf::Struct;
using google::protobuf::Value;
using sim::testing::BackgroundProcess;
using sim::testing::Env;
using sim::testing::SimWorld;

namespace {

// `count` consecutive free ports outside the ephemeral range: a server's port is base_port + gpu.
int ConsecutiveFreePorts(int count) {
  const absl::StatusOr<int> base = fleet::sim::ConsecutiveFreePorts(count);
  if (!base.ok()) ADD_FAILURE() << base.status();
  return base.value_or(0);
}

// fleetd's log line that names its metrics port: "metrics: SCHEME://HOST:PORT/metrics ...".
constexpr char kMetricsLine[] = "metrics: http";

}  // namespace

bool Eventually(const std::function<bool()>& holds, std::chrono::milliseconds timeout) {
  return testing::Eventually(holds, timeout, std::chrono::milliseconds(50));
}

Env ToolEnv() {
  Env env = {{"PATH", "/usr/bin:/bin"}};
  for (const char* name : {"ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  return env;
}

Struct ParseJson(const std::string& text) {
  Struct out;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return out;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value kNull;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kNull : it->second;
}
std::string Str(const Struct& s, const std::string& key) { return Field(s, key).string_value(); }
int64_t Int(const Struct& s, const std::string& key) {
  return static_cast<int64_t>(Field(s, key).number_value());
}
std::vector<Struct> Objects(const Struct& s, const std::string& key) {
  std::vector<Struct> out;
  for (const Value& v : Field(s, key).list_value().values()) out.push_back(v.struct_value());
  return out;
}

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

std::string ServerName(int gpu) { return absl::StrCat(kHost, "/", kCtid, "/gpu", gpu); }

WorldOptions SeedScenario() {
  return {.gpus = kSeedGpus,
          .state = "seed",
          .speed = 100,
          .remediation = "auto",
          .canary = true,
          .policy_yaml = "    max_attempts: 3\n"};
}

namespace {

// `options` with its engine decided: as given, else the suite's (FLEET_E2E_ENGINE), else sglang.
WorldOptions WithEngine(WorldOptions options) {
  if (options.engine.empty()) {
    const char* engine = std::getenv("FLEET_E2E_ENGINE");
    options.engine = engine != nullptr && *engine != '\0' ? engine : "sglang";
  }
  return options;
}

}  // namespace

WorldOptions SeedScenarioLearningFromTheCanary() {
  WorldOptions options = SeedScenario();
  options.policy_yaml += "    preflight: {test_compile: false}\n";
  return options;
}

Fleet::Fleet(WorldOptions options) : options_(WithEngine(std::move(options))) {
  std::filesystem::create_directories(dir_.Join("logs"));
  std::filesystem::create_directories(dir_.Join("out"));
  auto world = SimWorld::Create(dir_.Join("world"), options_.state, options_.breaks);
  if (!world.ok()) {
    ADD_FAILURE() << world.status();
    return;
  }
  world_.emplace(*std::move(world));
  base_port_ = ConsecutiveFreePorts(options_.gpus);
}

Fleet::~Fleet() {
  if (fleetd_) fleetd_->Stop(SIGKILL, std::chrono::seconds(10)).IgnoreError();
  if (agent_) agent_->Stop(SIGKILL, std::chrono::seconds(10)).IgnoreError();
  KillEverythingUnder(dir_.path());
}

std::string Fleet::log_path(int gpu) const {
  return dir_.Join(absl::StrCat("logs/gpu", gpu, ".log"));
}

std::string Fleet::ConfigYaml(const std::map<std::string, std::string>& more_env) const {
  Env env = world_->ServerEnv(0, options_.speed);
  env.erase("CUDA_VISIBLE_DEVICES");  // from `gpus`, never from env
  std::vector<std::string> gpus;
  std::set<int> grouped;
  std::string servers;
  for (const std::vector<int>& group : options_.tensor_parallel) {
    grouped.insert(group.begin(), group.end());
    absl::StrAppend(&servers, "          - gpus: [", absl::StrJoin(group, ", "), "]\n");
  }
  for (int g = 0; g < options_.gpus; ++g) {
    if (grouped.count(g) == 0) gpus.push_back(absl::StrCat(g));
  }
  const std::string tp_flag = options_.tensor_parallel.empty() ? ""
                              : options_.engine == "vllm"
                                  ? ", --tensor-parallel-size, \"{gpu_count}\""
                                  : ", --tp-size, \"{gpu_count}\"";
  std::string yaml = absl::StrCat(
      "hosts:\n"
      "  - name: ",
      kHost,
      "\n"
      "    containers:\n"
      "      - ctid: ",
      kCtid,
      "\n"
      "        channel: {kind: loopback, address: ",
      Quoted("unix:" + agent_socket()),
      "}\n"
      "        gpus: [",
      absl::StrJoin(gpus, ", "), "]\n",
      servers.empty() ? "" : absl::StrCat("        servers:\n", servers),
      "        template: sim\n"
      "        base_port: ",
      base_port_,
      "\n"
      // The world's own pip, apt-get and nvidia-smi: remediation acts on the world only.
      "        tools:\n"
      "          pip: [",
      Quoted(world_->Path("venv/bin/pip")),
      "]\n"
      "          apt_get: [",
      Quoted(world_->Path("bin/apt-get")),
      "]\n"
      "          nvidia_smi: [",
      Quoted(world_->Path("bin/nvidia-smi")),
      "]\n"
      "          venv: ",
      Quoted(world_->Path("venv")),
      "\n"
      "          jit_cache_roots: [",
      Quoted(world_->Path("root/.cache")),
      "]\n"
      "          toolkit_roots: [",
      Quoted(world_->Path("venv")),
      "]\n"
      "templates:\n"
      "  - name: sim\n"
      "    engine: ",
      options_.engine,
      "\n"
      "    model: ",
      Quoted(world_->Model()),
      "\n"
      "    argv: [",
      options_.engine == "vllm"
          ? absl::StrCat(Quoted(world_->Path("venv/bin/vllm")),
                         ", serve, \"{model}\", --host, 127.0.0.1, --port, \"{port}\"", tp_flag,
                         "]\n")
          : absl::StrCat(Quoted(world_->Path("venv/bin/python")),
                         ", -m, sglang.launch_server, --model-path, \"{model}\", --host, "
                         "127.0.0.1, --port, \"{port}\"",
                         tp_flag, "]\n"),
      "    log_path: ", Quoted(dir_.Join("logs/gpu{gpu}.log")),
      "\n"
      "    env:\n");
  for (const auto& [name, value] : options_.env) env[name] = value;
  for (const auto& [name, value] : more_env) env[name] = value;
  for (const auto& [name, value] : env) {
    absl::StrAppend(&yaml, "      ", name, ": ", Quoted(value), "\n");
  }
  absl::StrAppend(&yaml,
                  "policies:\n"
                  "  - name: default\n"
                  "    backoff_initial: 100ms\n"
                  "    backoff_max: 1s\n"
                  "    remediation: ",
                  options_.remediation, "\n", "    canary: ", options_.canary ? "true" : "false",
                  "\n", options_.policy_yaml, options_.extra_yaml);
  return yaml;
}

std::vector<int> Fleet::Leads() const {
  std::set<int> others;
  for (const std::vector<int>& group : options_.tensor_parallel) {
    others.insert(group.begin() + 1, group.end());
  }
  std::vector<int> leads;
  for (int g = 0; g < options_.gpus; ++g) {
    if (others.count(g) == 0) leads.push_back(g);
  }
  return leads;
}

std::string Fleet::WriteConfig() const {
  const std::string path = dir_.Join("fleet.yaml");
  dir_.WriteFile("fleet.yaml", ConfigYaml());
  return path;
}

void Fleet::StartAgent() {
  const std::string log = dir_.Join(absl::StrCat("agent.", ++agent_runs_, ".log"));
  auto p = BackgroundProcess::Start(
      {testing::BuildPath("agent/fleet-agent"), "--listen", "unix:" + agent_socket(), "--state-dir",
       dir_.Join("agent-state"), "--host", kHost, "--container", kCtid, "--readiness-interval",
       "0.1", "--sample-interval", "1", "--stop-grace", "5", "--dev-root",
       world_ ? world_->DevRoot() : ""},
      ToolEnv(), log);
  ASSERT_TRUE(p.ok()) << p.status();
  agent_ = *std::move(p);
  ASSERT_TRUE(agent_
                  ->WaitForLog(
                      [](const std::string& s) {
                        return absl::StrContains(s, "serving agent.proto on ") &&
                               absl::StrContains(s, ", incarnation ") &&
                               s.find('\n', s.find(", incarnation ")) != std::string::npos;
                      },
                      kDeadline)
                  .ok())
      << agent_->Log();
  stub_ = v1::Agent::NewStub(
      grpc::CreateChannel("unix:" + agent_socket(), grpc::InsecureChannelCredentials()));
}

void Fleet::KillAgent() {
  auto e = agent_->Stop(SIGKILL, std::chrono::seconds(10));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->signal, SIGKILL);
}

void Fleet::StartFleetd(const std::vector<std::string>& extra) {
  const std::string log = dir_.Join(absl::StrCat("fleetd.", ++fleetd_runs_, ".log"));
  std::vector<std::string> argv = {testing::BuildPath("daemon/fleetd"), "--state-dir", state_dir()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = BackgroundProcess::Start(argv, ToolEnv(), log);
  ASSERT_TRUE(p.ok()) << p.status();
  fleetd_ = *std::move(p);
  ASSERT_TRUE(fleetd_
                  ->WaitForLog(
                      [](const std::string& s) {
                        const size_t at = s.find(": serving on ");
                        return at != std::string::npos && s.find('\n', at) != std::string::npos;
                      },
                      kDeadline)
                  .ok())
      << fleetd_->Log();
}

void Fleet::KillFleetd() {
  auto e = fleetd_->Stop(SIGKILL, std::chrono::seconds(10));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->signal, SIGKILL);
}

int Fleet::MetricsPort() const {
  if (!fleetd_) return 0;
  const std::string log = fleetd_->Log();
  const size_t line = log.find(kMetricsLine);
  if (line == std::string::npos) return 0;
  const size_t end = log.find("/metrics", line + sizeof(kMetricsLine) - 1);
  const size_t colon = log.rfind(':', end);
  int port = 0;
  if (end == std::string::npos || colon == std::string::npos || colon < line ||
      !absl::SimpleAtoi(log.substr(colon + 1, end - colon - 1), &port)) {
    return 0;
  }
  return port;
}

CtlResult Fleet::Ctl(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {testing::BuildPath("cli/fleetctl"), "--socket",
                                   state_dir() + "/fleetd.sock"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunTool(argv, timeout);
}

CtlResult Fleet::RunTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CtlResult result;
  const std::string log = dir_.Join(absl::StrCat("out/", ++tool_runs_, ".out"));
  auto p = BackgroundProcess::Start(argv, ToolEnv(), log);
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return result;
  }
  auto e = (*p)->Wait(timeout);
  EXPECT_TRUE(e.ok()) << absl::StrJoin(argv, " ") << ": " << e.status();
  if (e.ok()) result.exit = *e;
  result.output = testing::ReadFile(log);
  return result;
}

void Fleet::Deploy() {
  const CtlResult r = Ctl({"deploy", "-f", WriteConfig()});
  ASSERT_EQ(r.code(), 0) << r.output;
  for (int g : Leads()) EXPECT_TRUE(absl::StrContains(r.output, ServerName(g))) << r.output;
}

CtlResult Fleet::DeployConfig(const std::string& yaml, const std::vector<std::string>& more) {
  const std::string name = absl::StrCat("fleet.", ++configs_, ".yaml");
  dir_.WriteFile(name, yaml);
  std::vector<std::string> args = {"deploy", "-f", dir_.Join(name)};
  args.insert(args.end(), more.begin(), more.end());
  return Ctl(args);
}

CtlResult Fleet::StartDeployAndWatch() {
  StartAgent();
  if (::testing::Test::HasFatalFailure()) return {};
  StartFleetd();
  if (::testing::Test::HasFatalFailure()) return {};
  Deploy();
  if (::testing::Test::HasFatalFailure()) return {};
  return Ctl({"status", "--watch", "--until-ready"});
}

std::map<std::string, Struct> Fleet::Status() {
  const CtlResult r = Ctl({"status", "-o", "json"});
  std::map<std::string, Struct> rows;
  if (r.code() != 0) {
    ADD_FAILURE() << r.output;
    return rows;
  }
  for (Struct& row : Objects(ParseJson(r.output), "servers")) rows[Str(row, "server")] = row;
  return rows;
}

bool Fleet::StatusEventually(const std::function<bool(const std::map<std::string, Struct>&)>& holds,
                             std::chrono::milliseconds timeout) {
  return Eventually([&] { return holds(Status()); }, timeout);
}

std::vector<Struct> Fleet::Attempts() {
  const CtlResult r = Ctl({"attempts", "-o", "json"});
  if (r.code() != 0) {
    ADD_FAILURE() << r.output;
    return {};
  }
  return Objects(ParseJson(r.output), "attempts");
}

v1::StatusResponse Fleet::AgentStatus() {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatusResponse r;
  const grpc::Status s = stub_->Status(&c, v1::StatusRequest(), &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r;
}

std::map<int, v1::ServerStatus> Fleet::AgentServers() {
  std::map<int, v1::ServerStatus> out;
  const v1::StatusResponse status = AgentStatus();
  for (const v1::ServerStatus& s : status.servers()) out[s.server().gpu()] = s;
  return out;
}

std::string Fleet::Diagnostics() {
  std::string out = absl::StrCat("--- fleetd:\n", fleetd_ ? fleetd_->Log() : "", "--- agent:\n",
                                 agent_ ? agent_->Log() : "");
  for (int g = 0; g < options_.gpus; ++g) {
    absl::StrAppend(&out, "--- ", log_path(g), ":\n", testing::ReadFile(log_path(g)));
  }
  return out;
}

void Fleet::KillEverythingUnder(const std::string& root) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (const dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid == getpid()) continue;
    const std::string cmdline = testing::ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (!absl::StrContains(cmdline, root + "/")) continue;
    const pid_t pgid = getpgid(pid);
    if (pgid > 0 && pgid != getpgrp()) kill(-pgid, SIGKILL);
    kill(pid, SIGKILL);
  }
  closedir(proc);
}

}  // namespace fleet::e2e

// The whole fleet, end to end: the real fleetd, fleet-agent and fleetctl binaries and the
// simulated SGLang server in a simulated container world (tests/sim/), talking real gRPC over
// unix sockets. Each test builds its own world in its own temp dir, starts an agent for the
// container and a daemon on a state dir there, and drives everything through fleetctl as a user
// would: deploy and watch, a world that cannot start (GAVE_UP with its diagnosis, explain, logs),
// restart and stop, fleetd killed with SIGKILL mid-deploy, the agent killed and restarted under
// a following daemon, config errors, and a give-up POSTed to a webhook receiver that then hangs.
// Waits are on conditions with deadlines, never on sleeps; everything started is killed when a
// test ends.
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/sqlite/database.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"
#include "proto/fleet.pb.h"
#include "tests/e2e/fleet.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/webhook_receiver.h"

namespace fleet {
namespace {

using e2e::CtlResult;
using e2e::Eventually;
using e2e::Field;
using e2e::Fleet;
using e2e::Int;
using e2e::kDeadline;
using e2e::Objects;
using e2e::ParseJson;
using e2e::Quoted;
using e2e::ServerName;
using e2e::Str;
using e2e::ToolEnv;
using e2e::WorldOptions;
using fleet::sim::testing::BackgroundProcess;
using google::protobuf::Struct;
using google::protobuf::Value;
using SteadyClock = std::chrono::steady_clock;

bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

bool AllInState(const std::map<std::string, Struct>& rows, size_t count, const std::string& state) {
  if (rows.size() != count) return false;
  for (const auto& [name, row] : rows) {
    if (Str(row, "state") != state) return false;
  }
  return true;
}

// Every attempt, by server then number.
std::map<std::string, std::map<int64_t, Struct>> ByServer(const std::vector<Struct>& attempts) {
  std::map<std::string, std::map<int64_t, Struct>> out;
  for (const Struct& a : attempts) out[Str(a, "server")][Int(a, "number")] = a;
  return out;
}

// Opens fleet.db with the project's SQLite layer (as `sqlite3` would, while fleetd runs).
std::unique_ptr<sqlite::Database> OpenDb(const std::string& path) {
  auto db = sqlite::Database::Open(path);
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? *std::move(db) : nullptr;
}

std::string IntegrityCheck(sqlite::Database& db) {
  auto st = db.Prepare("PRAGMA integrity_check");
  if (!st.ok()) return st.status().ToString();
  std::vector<std::string> lines;
  while (true) {
    auto row = st->Step();
    if (!row.ok()) return row.status().ToString();
    if (!*row) break;
    lines.push_back(st->ColumnText(0));
  }
  return absl::StrJoin(lines, "\n");
}

int64_t QueryInt(sqlite::Database& db, const std::string& sql) {
  auto st = db.Prepare(sql);
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return -1;
  auto row = st->Step();
  EXPECT_TRUE(row.ok() && *row) << sql;
  return row.ok() && *row ? st->ColumnInt(0) : -1;
}

// The pids whose GPU memory the simulated driver records on `gpu` (WORLD/run/gpu-mem/GPU/PID).
std::set<pid_t> GpuMemoryHolders(const Fleet& fleet, int gpu) {
  std::set<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(
           fleet.world().Path(absl::StrCat("run/gpu-mem/", gpu)), ec)) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &pid) && kill(pid, 0) == 0) {
      out.insert(pid);
    }
  }
  return out;
}

// A tensor-parallel server (GPUs 0 and 1, the engine's TP flag from {gpu_count}) next to one-GPU
// servers, on each engine: one server, one row with its GPUs, READY once; its processes hold both
// GPUs; a restart brings it back on both, the old processes gone.
void TensorParallelServerSpansItsGpus(const std::string& engine) {
  Fleet fleet({.gpus = 3, .engine = engine, .tensor_parallel = {{0, 1}}});
  ASSERT_TRUE(fleet.ok());
  CtlResult watch;
  ASSERT_NO_FATAL_FAILURE(watch = fleet.StartDeployAndWatch());
  ASSERT_EQ(watch.code(), 0) << watch.output << fleet.Diagnostics();
  EXPECT_FALSE(absl::StrContains(watch.output, ServerName(1))) << watch.output;

  std::map<std::string, Struct> rows = fleet.Status();
  ASSERT_EQ(rows.size(), 2u) << "GPU 1 is the TP server's";
  const auto gpus_of = [](const Struct& row) {
    std::vector<int> out;
    for (const auto& v : Field(row, "gpus").list_value().values()) {
      out.push_back(static_cast<int>(v.number_value()));
    }
    return out;
  };
  EXPECT_THAT(gpus_of(rows[ServerName(0)]), ::testing::ElementsAre(0, 1));
  EXPECT_THAT(gpus_of(rows[ServerName(2)]), ::testing::ElementsAre(2));
  const CtlResult table = fleet.Ctl({"status"});
  EXPECT_TRUE(absl::StrContains(table.output, "GPUS")) << table.output;
  EXPECT_TRUE(absl::StrContains(table.output, " 0,1\n")) << table.output;

  // The server's own log: two tensor-parallel ranks on it, one port.
  const std::string log = testing::ReadFile(fleet.log_path(0));
  EXPECT_TRUE(absl::StrContains(log, engine == "vllm" ? "(Worker_TP1 pid=" : "TP1]")) << log;
  // Both GPUs held by processes of the server's session, none by another.
  std::map<int, v1::ServerStatus> servers = fleet.AgentServers();
  ASSERT_EQ(servers.size(), 2u);
  const pid_t leader = servers[0].pid();
  ASSERT_GT(leader, 0);
  for (int gpu : {0, 1}) {
    const std::set<pid_t> holders = GpuMemoryHolders(fleet, gpu);
    EXPECT_FALSE(holders.empty()) << "nothing holds gpu " << gpu;
    for (pid_t pid : holders) EXPECT_EQ(getsid(pid), leader) << "gpu " << gpu << " pid " << pid;
  }
  std::vector<Struct> attempts = fleet.Attempts();
  ASSERT_EQ(attempts.size(), 2u);
  for (const Struct& a : attempts) EXPECT_EQ(Str(a, "outcome"), "ready") << Str(a, "id");

  // Restarted: READY again on both GPUs, its old processes gone from both.
  ASSERT_EQ(fleet.Ctl({"restart", ServerName(0)}).code(), 0);
  ASSERT_TRUE(fleet.StatusEventually([](const auto& now) {
    auto it = now.find(ServerName(0));
    return it != now.end() && Int(it->second, "attempt_number") == 2 &&
           Str(it->second, "state") == "READY";
  })) << fleet.Diagnostics();
  servers = fleet.AgentServers();
  ASSERT_GT(servers[0].pid(), 0);
  EXPECT_NE(servers[0].pid(), leader);
  for (int gpu : {0, 1}) {
    for (pid_t pid : GpuMemoryHolders(fleet, gpu)) {
      EXPECT_EQ(getsid(pid), servers[0].pid()) << "gpu " << gpu << " pid " << pid;
    }
  }
}

// GPUs 0 and 1 folded into one tensor-parallel server by a deploy while their one-GPU servers
// run: gpu1 is removed, gpu0 restarts on both, its GPU check waiting for gpu1's memory to go;
// one server READY on 0,1, nothing left of the old gpu1.
TEST(FleetE2e, FoldingTwoRunningServersIntoATensorParallelOneConverges) {
  WorldOptions options{.gpus = 2};
  Fleet fleet(options);
  ASSERT_TRUE(fleet.ok());
  CtlResult watch;
  ASSERT_NO_FATAL_FAILURE(watch = fleet.StartDeployAndWatch());
  ASSERT_EQ(watch.code(), 0) << watch.output << fleet.Diagnostics();
  const pid_t old_gpu1 = fleet.AgentServers()[1].pid();
  ASSERT_GT(old_gpu1, 0);

  // The same config with GPUs 0 and 1 as one server and the engine's tensor-parallel flag.
  std::string yaml = fleet.ConfigYaml();
  const std::string tp_flag = fleet.engine() == "vllm"
                                  ? ", --tensor-parallel-size, \"{gpu_count}\"]"
                                  : ", --tp-size, \"{gpu_count}\"]";
  ASSERT_TRUE(absl::StrContains(yaml, "        gpus: [0, 1]\n"));
  absl::StrReplaceAll(
      {{"        gpus: [0, 1]\n", "        gpus: []\n        servers:\n          - gpus: [0, 1]\n"},
       {"\"{port}\"]\n", absl::StrCat("\"{port}\"", tp_flag, "\n")}},
      &yaml);
  const CtlResult deploy = fleet.DeployConfig(yaml);
  ASSERT_EQ(deploy.code(), 0) << deploy.output << yaml;
  ASSERT_TRUE(fleet.StatusEventually([](const auto& rows) {
    auto it = rows.find(ServerName(0));
    return rows.size() == 1 && it != rows.end() && Str(it->second, "state") == "READY" &&
           Int(it->second, "attempt_number") == 2;
  })) << fleet.Ctl({"status", "-o", "json"}).output
      << fleet.Diagnostics();
  EXPECT_TRUE(Eventually([&] { return GroupGone(old_gpu1); })) << "the old gpu1 lives on";
  const std::map<int, v1::ServerStatus> servers = fleet.AgentServers();
  ASSERT_GT(servers.at(0).pid(), 0);
  for (pid_t pid : GpuMemoryHolders(fleet, 1)) {
    EXPECT_EQ(getsid(pid), servers.at(0).pid()) << "gpu 1 held by pid " << pid;
  }
  EXPECT_FALSE(GpuMemoryHolders(fleet, 1).empty()) << "the TP server holds gpu 1";
}

TEST(FleetE2e, VllmTensorParallelServerSpansItsGpus) { TensorParallelServerSpansItsGpus("vllm"); }
TEST(FleetE2e, SglangTensorParallelServerSpansItsGpus) {
  TensorParallelServerSpansItsGpus("sglang");
}

// 1. A fixed world deploys and every server becomes READY: `status --watch --until-ready` prints
// one line per change and exits 0; status and attempts agree; the servers really serve.
TEST(FleetE2e, DeployAndWatchUntilReady) {
  // Slow enough (about 2.5 s a start) for the watch to see the start, not only its end.
  Fleet fleet({.gpus = 3, .speed = 20});
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());

  const CtlResult watch = fleet.Ctl({"status", "--watch", "--until-ready"});
  ASSERT_EQ(watch.code(), 0) << watch.output << fleet.Diagnostics();
  // Not a terminal: one logfmt line per change, "TIME SERVER STATE key=value...", never the
  // same line twice in a row for a server, each server's last line READY.
  std::map<std::string, std::vector<std::string>> lines_of;
  for (std::string_view view : testing::SplitLines(watch.output)) {
    const std::string line(view);
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    ASSERT_GE(words.size(), 3u) << line;
    EXPECT_TRUE(absl::EndsWith(words[0], "Z")) << line;
    auto& seen = lines_of[words[1]];
    const std::string rest = line.substr(words[0].size() + 1);
    if (!seen.empty()) {
      EXPECT_NE(seen.back(), rest) << "a line repeated:\n" << watch.output;
    }
    seen.push_back(rest);
  }
  ASSERT_EQ(lines_of.size(), 3u) << watch.output;
  bool saw_progress = false;
  for (int g = 0; g < 3; ++g) {
    const auto& seen = lines_of[ServerName(g)];
    ASSERT_FALSE(seen.empty()) << watch.output;
    EXPECT_TRUE(absl::StartsWith(seen.back(), ServerName(g) + " READY")) << watch.output;
    EXPECT_TRUE(absl::StrContains(seen.back(), "attempt=1")) << watch.output;
    saw_progress = saw_progress || seen.size() > 1;
  }
  EXPECT_TRUE(saw_progress) << "the watch saw no start, only its end:\n" << watch.output;
  // The agent's ninja [n/m] made it through fleetd to the watch.
  EXPECT_TRUE(absl::StrContains(watch.output, " JIT_COMPILING phase=") &&
              absl::StrContains(watch.output, " progress=3/3 "))
      << watch.output;

  const auto rows = fleet.Status();
  ASSERT_TRUE(AllInState(rows, 3, "READY")) << fleet.Ctl({"status", "-o", "json"}).output;
  for (int g = 0; g < 3; ++g) {
    const Struct& row = rows.at(ServerName(g));
    EXPECT_EQ(Int(row, "attempt_number"), 1);
    EXPECT_EQ(Int(row, "port"), fleet.port(g));
    EXPECT_EQ(Str(row, "last_diagnosis_class"), "");
    EXPECT_EQ(Str(row, "reason"), "");
    // READY means serving: the simulated server answers a real generation on its port.
    auto reply = fleet.engine() == "vllm"
                     ? sim::testing::HttpRequest(fleet.port(g), "POST", "/v1/completions",
                                                 R"({"prompt": "hi", "max_tokens": 1})")
                     : sim::testing::HttpRequest(fleet.port(g), "GET", "/health_generate");
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 200);
  }

  const std::vector<Struct> attempts = fleet.Attempts();
  ASSERT_EQ(attempts.size(), 3u);
  std::set<std::string> ids;
  for (const Struct& a : attempts) {
    EXPECT_EQ(Int(a, "number"), 1);
    EXPECT_EQ(Str(a, "outcome"), "ready");
    EXPECT_EQ(Str(a, "trigger"), "initial");
    EXPECT_EQ(Field(a, "time_to_ready_ms").kind_case(), Value::kNumberValue);
    ids.insert(Str(a, "id"));
  }
  EXPECT_EQ(ids.size(), 3u);
  // The agent runs exactly those attempts.
  for (const auto& [gpu, s] : fleet.AgentServers()) {
    EXPECT_EQ(s.state(), "READY");
    EXPECT_TRUE(ids.count(s.attempt_id())) << s.attempt_id();
  }
}

// 2. A world with a seed problem put back: every start fails with the root cause, fleetd gives
// up (a restart cannot fix a toolchain), `status --until-ready` says so with exit 2, and explain
// and logs show the stored diagnosis and the log as the server wrote it.
// What a give-up looks like on one engine.
struct GiveUp {
  std::string want_class;
  std::string root_cause_text;
  int want_exit_code = 1;
};

void ExpectGivesUp(const WorldOptions& options, const std::map<std::string, GiveUp>& by_engine) {
  Fleet fleet(options);
  ASSERT_TRUE(fleet.ok());
  ASSERT_EQ(by_engine.count(fleet.engine()), 1u) << fleet.engine();
  const auto& [want_class, root_cause_text, want_exit_code] = by_engine.at(fleet.engine());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());

  const CtlResult watch = fleet.Ctl({"status", "--watch", "--until-ready"});
  EXPECT_EQ(watch.code(), 2) << watch.output << fleet.Diagnostics();
  // It ends at the first server that gave up, naming it with the reason.
  EXPECT_TRUE(absl::StrContains(watch.output, " gave up: " + want_class + ": ")) << watch.output;
  ASSERT_TRUE(fleet.StatusEventually([&](const auto& rows) {
    return AllInState(rows, static_cast<size_t>(options.gpus), "GAVE_UP");
  })) << fleet.Diagnostics();
  for (const auto& [name, row] : fleet.Status()) {
    EXPECT_EQ(Str(row, "last_diagnosis_class"), want_class) << name;
    EXPECT_TRUE(absl::StartsWith(Str(row, "reason"), want_class + ": ")) << Str(row, "reason");
    EXPECT_EQ(Int(row, "attempt_number"), 1) << name;
  }
  // One attempt each: retrying cannot help, so none was made.
  const std::vector<Struct> attempts = fleet.Attempts();
  ASSERT_EQ(attempts.size(), static_cast<size_t>(options.gpus));
  for (const Struct& a : attempts) {
    EXPECT_EQ(Str(a, "outcome"), "failed");
    EXPECT_EQ(Str(a, "diagnosis_class"), want_class);
    const Struct& exit = Field(a, "exit").struct_value();
    EXPECT_TRUE(Field(exit, "exited").bool_value()) << Str(a, "server");
    EXPECT_EQ(Int(exit, "exit_code"), want_exit_code) << Str(a, "server");
  }

  for (int g = 0; g < options.gpus; ++g) {
    const std::string log = testing::ReadFile(fleet.log_path(g));
    ASSERT_TRUE(absl::StrContains(log, root_cause_text)) << log;

    const CtlResult explain = fleet.Ctl({"explain", "--server", ServerName(g), "-o", "json"});
    ASSERT_EQ(explain.code(), 0) << explain.output;
    const Struct d = ParseJson(explain.output);
    EXPECT_EQ(Str(d, "class"), want_class) << explain.output;
    EXPECT_EQ(Str(d, "file"), ServerName(g) + "#1");
    EXPECT_TRUE(Field(d, "toolchain_fix").bool_value()) << explain.output;
    // The root-cause line is the log's own line number of the error.
    const int64_t line = Int(d, "root_cause_line");
    const std::vector<std::string_view> lines = testing::SplitLines(log);
    ASSERT_GT(line, 0) << explain.output;
    ASSERT_LE(line, static_cast<int64_t>(lines.size()));
    const std::string text(lines[line - 1]);
    EXPECT_TRUE(absl::StrContains(text, root_cause_text)) << text;
    bool evidence_has_it = false;
    for (const Struct& e : Objects(d, "evidence")) {
      evidence_has_it = evidence_has_it || (Int(e, "line") == line &&
                                            absl::StrContains(Str(e, "text"), root_cause_text));
    }
    EXPECT_TRUE(evidence_has_it) << explain.output;

    // The log through fleetd and the agent, byte for byte as the server wrote it.
    const CtlResult logs = fleet.Ctl({"logs", ServerName(g)});
    ASSERT_EQ(logs.code(), 0) << logs.output;
    EXPECT_EQ(logs.output, log);
  }
}

TEST(FleetE2e, OldPtxasGivesUpWithTheRootCause) {
  // SGLang ends through its SIGQUIT path (exit 0); vLLM's API server exits 1 after EngineCore.
  ExpectGivesUp({.gpus = 2, .state = "fixed", .breaks = {"ptxas"}},
                {{"sglang", {"ptx_version_unsupported", "Unsupported .version 9.2", 0}},
                 {"vllm", {"ptx_version_unsupported", "Unsupported .version 9.2", 1}}});
}

TEST(FleetE2e, SeedWorldGivesUpOnTheFirstProblemOfTheCascade) {
  // vLLM imports no sgl_kernel: the loader path is not its first problem, nvcc is.
  ExpectGivesUp({.gpus = 1, .state = "seed"},
                {{"sglang", {"missing_shared_library", "libnvrtc.so.13", 1}},
                 {"vllm", {"nvcc_not_found", "Could not find nvcc", 1}}});
}

// 3. `fleetctl restart` makes exactly one new attempt and a new server process; `fleetctl stop`
// ends STOPPED with the server's processes gone.
TEST(FleetE2e, RestartMakesOneNewAttemptAndStopEndsTheServer) {
  Fleet fleet({.gpus = 2});
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());
  ASSERT_EQ(fleet.Ctl({"status", "--until-ready"}).code(), 0) << fleet.Diagnostics();
  auto before = fleet.AgentServers();
  ASSERT_EQ(before.size(), 2u);
  const pid_t old_pid = before[0].pid();
  ASSERT_GT(old_pid, 0);

  const CtlResult restart = fleet.Ctl({"restart", ServerName(0)});
  ASSERT_EQ(restart.code(), 0) << restart.output;
  EXPECT_TRUE(absl::StrContains(restart.output, ServerName(0))) << restart.output;
  ASSERT_TRUE(fleet.StatusEventually([](const auto& rows) {
    auto it = rows.find(ServerName(0));
    return it != rows.end() && Int(it->second, "attempt_number") == 2 &&
           Str(it->second, "state") == "READY";
  })) << fleet.Diagnostics();
  EXPECT_TRUE(Eventually([&] { return GroupGone(old_pid); })) << "the old server lives on";

  auto attempts = ByServer(fleet.Attempts());
  ASSERT_EQ(attempts[ServerName(0)].size(), 2u);
  ASSERT_EQ(attempts[ServerName(1)].size(), 1u);
  EXPECT_EQ(Str(attempts[ServerName(0)][1], "outcome"), "stopped");
  EXPECT_EQ(Str(attempts[ServerName(0)][1], "trigger"), "initial");
  EXPECT_EQ(Str(attempts[ServerName(0)][2], "outcome"), "ready");
  EXPECT_EQ(Str(attempts[ServerName(0)][2], "trigger"), "restart");
  EXPECT_EQ(Str(attempts[ServerName(1)][1], "outcome"), "ready");
  auto after = fleet.AgentServers();
  EXPECT_NE(after[0].pid(), old_pid);
  EXPECT_EQ(after[0].attempt_id(), Str(attempts[ServerName(0)][2], "id"));
  EXPECT_EQ(after[0].attempt_number(), 2);
  EXPECT_EQ(after[1].pid(), before[1].pid());  // the other server was left alone

  // Stop one: STOPPED, its process group gone, its port closed, the attempt closed as stopped.
  const pid_t pid1 = after[1].pid();
  const CtlResult stop = fleet.Ctl({"stop", ServerName(1)});
  ASSERT_EQ(stop.code(), 0) << stop.output;
  ASSERT_TRUE(fleet.StatusEventually([](const auto& rows) {
    auto it = rows.find(ServerName(1));
    return it != rows.end() && Str(it->second, "state") == "STOPPED";
  })) << fleet.Diagnostics();
  EXPECT_TRUE(Eventually([&] { return GroupGone(pid1); })) << "the stopped server lives on";
  EXPECT_FALSE(sim::testing::HttpRequest(fleet.port(1), "GET", "/health").ok());
  attempts = ByServer(fleet.Attempts());
  ASSERT_EQ(attempts[ServerName(1)].size(), 1u);
  EXPECT_EQ(Str(attempts[ServerName(1)][1], "outcome"), "stopped");
  EXPECT_EQ(Str(fleet.Status().at(ServerName(0)), "state"), "READY");

  // Stop the rest: nothing will become ready, and --until-ready says so.
  ASSERT_EQ(fleet.Ctl({"stop", "--all"}).code(), 0);
  ASSERT_TRUE(fleet.StatusEventually([](const auto& rows) {
    return AllInState(rows, 2, "STOPPED");
  })) << fleet.Diagnostics();
  EXPECT_TRUE(Eventually([&] { return GroupGone(after[0].pid()); }));
  const CtlResult until = fleet.Ctl({"status", "--until-ready"});
  EXPECT_EQ(until.code(), 2) << until.output;
  EXPECT_TRUE(absl::StrContains(until.output, "every server is stopped")) << until.output;
  EXPECT_EQ(fleet.Attempts().size(), 3u);  // stopping makes no attempt
}

// Shared checks after fleetd came back on its state dir: every server READY on its first
// attempt, the very attempts (ids, pids) the agent was running, and a sound record.
void ExpectRecoveredWithoutRelaunch(Fleet& fleet, int gpus,
                                    const std::map<int, v1::ServerStatus>& launched) {
  const CtlResult watch = fleet.Ctl({"status", "--watch", "--until-ready"});
  ASSERT_EQ(watch.code(), 0) << watch.output << fleet.Diagnostics();
  const auto rows = fleet.Status();
  ASSERT_TRUE(AllInState(rows, static_cast<size_t>(gpus), "READY"));

  auto now = fleet.AgentServers();
  ASSERT_EQ(now.size(), static_cast<size_t>(gpus));
  const std::vector<Struct> attempts = fleet.Attempts();
  ASSERT_EQ(attempts.size(), static_cast<size_t>(gpus)) << fleet.Ctl({"attempts"}).output;
  auto by_server = ByServer(attempts);
  for (int g = 0; g < gpus; ++g) {
    const auto& mine = by_server[ServerName(g)];
    ASSERT_EQ(mine.size(), 1u) << ServerName(g);
    ASSERT_EQ(mine.begin()->first, 1);
    const Struct& a = mine.begin()->second;
    EXPECT_EQ(Str(a, "outcome"), "ready");
    EXPECT_EQ(Str(a, "id"), now[g].attempt_id());
    EXPECT_EQ(now[g].attempt_number(), 1);
    EXPECT_EQ(now[g].state(), "READY");
    if (launched.count(g)) {
      // Not relaunched: the same process and attempt the agent ran before fleetd died.
      EXPECT_EQ(now[g].pid(), launched.at(g).pid()) << ServerName(g);
      EXPECT_EQ(now[g].attempt_id(), launched.at(g).attempt_id()) << ServerName(g);
    }
  }

  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(IntegrityCheck(*db), "ok");
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM attempts"), gpus);
  EXPECT_EQ(QueryInt(*db,
                     "SELECT count(*) FROM (SELECT server_id, number FROM attempts "
                     "GROUP BY server_id, number HAVING count(*) > 1)"),
            0);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM attempts WHERE number <> 1 OR outcome <> 'ready'"),
            0);
}

// 4. fleetd killed with SIGKILL while the servers start, then started again on the same state
// dir: it takes up where it was (the config, the attempts and the agent's event stream from its
// record), the servers become READY without being launched again, no attempt row is doubled,
// and the database is intact. A second fleetd on the same state dir is refused meanwhile.
TEST(FleetE2e, FleetdKilledMidDeployRecoversWithoutRelaunching) {
  Fleet fleet({.gpus = 3, .speed = 8});  // about 6 s a start: killed well before READY
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());
  // Mid-deploy: the agent runs every server, and none is ready yet.
  std::map<int, v1::ServerStatus> launched;
  ASSERT_TRUE(Eventually([&] {
    launched = fleet.AgentServers();
    if (launched.size() != 3) return false;
    for (const auto& [gpu, s] : launched) {
      if (s.pid() <= 0 || s.attempt_id().empty()) return false;
    }
    return true;
  })) << fleet.Diagnostics();
  int ready_at_kill = 0;
  for (const auto& [gpu, s] : launched) ready_at_kill += s.state() == "READY";
  ASSERT_NO_FATAL_FAILURE(fleet.KillFleetd());
  EXPECT_LT(ready_at_kill, 3) << "every server was ready before fleetd was killed";

  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());  // no --config: the stored one
  const CtlResult second =
      fleet.RunTool({testing::BuildPath("daemon/fleetd"), "--state-dir", fleet.state_dir()});
  EXPECT_EQ(second.code(), 1) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "another fleetd runs on")) << second.output;

  ExpectRecoveredWithoutRelaunch(fleet, 3, launched);
}

// fleetd killed right after it took the deploy: attempts may be written and not yet launched;
// on its return it launches those very attempts (Launch is idempotent on the id), no others.
TEST(FleetE2e, FleetdKilledRightAfterDeployLaunchesEachAttemptOnce) {
  Fleet fleet({.gpus = 2});
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());
  ASSERT_NO_FATAL_FAILURE(fleet.KillFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ExpectRecoveredWithoutRelaunch(fleet, 2, {});
}

// 5. The agent killed with SIGKILL under a following fleetd, and started again on its state
// dir while the servers kept starting: fleetd reconnects, the servers it re-adopted become READY
// without a new attempt, and fleetd's copy of the agent's event stream has every sequence once.
TEST(FleetE2e, AgentKilledAndRestartedResumesTheEventStream) {
  Fleet fleet({.gpus = 2, .speed = 8});  // about 6 s a start: the agent dies mid-start
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());
  const std::string container_events =
      "FROM events WHERE container_id = (SELECT id FROM containers WHERE name = 'local/sim')";
  // fleetd follows the agent: it stored the first events of every server.
  std::map<int, v1::ServerStatus> launched;
  ASSERT_TRUE(Eventually([&] {
    launched = fleet.AgentServers();
    if (launched.size() != 2) return false;
    for (const auto& [gpu, s] : launched) {
      if (s.pid() <= 0) return false;
    }
    auto db = OpenDb(fleet.db_path());
    return db != nullptr && QueryInt(*db, "SELECT count(DISTINCT server) " + container_events +
                                              " AND server <> ''") == 2;
  })) << fleet.Diagnostics();
  const std::string incarnation = fleet.AgentStatus().incarnation();
  int64_t stored_before = 0;
  {
    auto db = OpenDb(fleet.db_path());
    ASSERT_NE(db, nullptr);
    stored_before = QueryInt(*db, "SELECT max(sequence) " + container_events);
  }
  std::map<int, size_t> log_sizes;
  for (int g = 0; g < 2; ++g) log_sizes[g] = testing::ReadFile(fleet.log_path(g)).size();
  ASSERT_NO_FATAL_FAILURE(fleet.KillAgent());
  // The servers go on without their agent: their logs grow while nobody follows them.
  ASSERT_TRUE(Eventually([&] {
    for (int g = 0; g < 2; ++g) {
      if (testing::ReadFile(fleet.log_path(g)).size() <= log_sizes[g]) return false;
    }
    return true;
  })) << fleet.Diagnostics();

  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  EXPECT_EQ(fleet.AgentStatus().incarnation(), incarnation);  // the same agent record
  ASSERT_NO_FATAL_FAILURE(ExpectRecoveredWithoutRelaunch(fleet, 2, launched));

  // fleetd caught up with everything the agent said...
  uint64_t agent_sequence = 0;
  ASSERT_TRUE(Eventually([&] {
    agent_sequence = fleet.AgentStatus().sequence();
    auto db = OpenDb(fleet.db_path());
    return db != nullptr && QueryInt(*db, "SELECT max(sequence) " + container_events) ==
                                static_cast<int64_t>(agent_sequence);
  })) << "agent at "
      << agent_sequence << "\n"
      << fleet.Diagnostics();
  // ...once each, in one run per incarnation (one incarnation here: the agent kept its record),
  // with no gap where the agent was away.
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(IntegrityCheck(*db), "ok");
  EXPECT_EQ(QueryInt(*db, "SELECT count(DISTINCT incarnation) " + container_events), 1);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) " + container_events + " AND incarnation <> '" +
                              incarnation + "'"),
            0);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) " + container_events + " AND kind = 'gap'"), 0);
  const int64_t min = QueryInt(*db, "SELECT min(sequence) " + container_events);
  const int64_t max = QueryInt(*db, "SELECT max(sequence) " + container_events);
  const int64_t count = QueryInt(*db, "SELECT count(*) " + container_events);
  const int64_t distinct = QueryInt(*db, "SELECT count(DISTINCT sequence) " + container_events);
  EXPECT_GE(min, 1);
  EXPECT_EQ(count, distinct);
  EXPECT_EQ(max - min + 1, count) << "sequences " << min << ".." << max << " in " << count
                                  << " rows";
  EXPECT_GT(max, stored_before);  // events of after the restart are there too
  // Each server's readiness was stored once.
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) " + container_events + " AND kind = 'ready'"), 2);
}

// 6. A config with mistakes: fleetctl deploy and fleetd --config both name FILE:LINE and the
// field, exit 1, and change nothing.
TEST(FleetE2e, ConfigErrorsNameFileLineAndField) {
  testing::TempDir dir;
  // Line 5: a misspelt field; the loader suggests the right one.
  dir.WriteFile("typo.yaml",
                "hosts:\n"
                "  - name: local\n"
                "    containers:\n"
                "      - ctid: \"200\"\n"
                "        gpu: [0, 1]\n"
                "        template: sglang\n"
                "        base_port: 30000\n"
                "templates:\n"
                "  - name: sglang\n"
                "    argv: [/venv/bin/python]\n");
  // Line 7: a port out of range for the last GPU (a semantic check, after the schema).
  dir.WriteFile("ports.yaml",
                "hosts:\n"
                "  - name: local\n"
                "    containers:\n"
                "      - ctid: \"200\"\n"
                "        gpus: [0, 7]\n"
                "        template: sglang\n"
                "        base_port: 65530\n"
                "templates:\n"
                "  - name: sglang\n"
                "    argv: [/venv/bin/python]\n");
  const std::string typo = dir.Join("typo.yaml");
  const std::string ports = dir.Join("ports.yaml");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {typo, typo + ":5: hosts[0].containers[0]: unknown field 'gpu' (did you mean 'gpus'?)"},
      {ports, ports + ":7: hosts[0].containers[0].base_port: base_port 65530 + gpu 7 = 65537 is "
                      "outside 1..65535"},
  };

  auto run = [&](const std::vector<std::string>& argv) {
    CtlResult result;
    const std::string out = dir.Join("run.out");
    std::filesystem::remove(out);
    auto p = BackgroundProcess::Start(argv, ToolEnv(), out);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return result;
    auto e = (*p)->Wait(kDeadline);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) result.exit = *e;
    result.output = testing::ReadFile(out);
    return result;
  };

  // A running fleetd on an empty state, to show that nothing reaches it.
  auto fleetd = BackgroundProcess::Start(
      {testing::BuildPath("daemon/fleetd"), "--state-dir", dir.Join("state")}, ToolEnv(),
      dir.Join("fleetd.log"));
  ASSERT_TRUE(fleetd.ok()) << fleetd.status();
  ASSERT_TRUE(
      (*fleetd)
          ->WaitForLog([](const std::string& s) { return absl::StrContains(s, "serving on"); },
                       kDeadline)
          .ok())
      << (*fleetd)->Log();
  const std::string socket = dir.Join("state/fleetd.sock");

  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [file, want] = cases[i];
    const CtlResult deploy =
        run({testing::BuildPath("cli/fleetctl"), "--socket", socket, "deploy", "-f", file});
    EXPECT_EQ(deploy.code(), 1) << deploy.output;
    EXPECT_TRUE(absl::StrContains(deploy.output, want)) << deploy.output;

    const std::string state = dir.Join(absl::StrCat("fleetd-state-", i));
    const CtlResult daemon =
        run({testing::BuildPath("daemon/fleetd"), "--config", file, "--state-dir", state});
    EXPECT_EQ(daemon.code(), 1) << daemon.output;
    EXPECT_TRUE(absl::StrContains(daemon.output, want)) << daemon.output;
    // Reported before anything else happens: no record was made.
    EXPECT_FALSE(std::filesystem::exists(state + "/fleet.db"));
  }

  // The running fleetd got nothing: it holds no config and no servers.
  const CtlResult status =
      run({testing::BuildPath("cli/fleetctl"), "--socket", socket, "status", "-o", "json"});
  ASSERT_EQ(status.code(), 0) << status.output;
  EXPECT_TRUE(Objects(ParseJson(status.output), "servers").empty()) << status.output;
  const CtlResult redeploy =
      run({testing::BuildPath("cli/fleetctl"), "--socket", socket, "deploy"});
  EXPECT_EQ(redeploy.code(), 1) << redeploy.output;
  EXPECT_TRUE(absl::StrContains(redeploy.output, "holds no config")) << redeploy.output;
}

// 6. Remediation: fleetd probes the container before the first launch, plans for each failure it
// can fix, applies the plan once for the container through the agent (the world's own pip and
// apt-get), and restarts what waited on it; the store keeps every remediation and its actions.

// The remediations as fleetd recorded them (the plan column), oldest first.
std::vector<v1::Plan> StoredPlans(sqlite::Database& db) {
  std::vector<v1::Plan> out;
  auto st = db.Prepare("SELECT id, plan, status, trigger FROM remediations ORDER BY id");
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return out;
  while (true) {
    auto row = st->Step();
    EXPECT_TRUE(row.ok()) << row.status();
    if (!row.ok() || !*row) break;
    v1::Plan plan;
    EXPECT_TRUE(plan.ParseFromString(st->ColumnBlob(1)));
    EXPECT_EQ(plan.status(), st->ColumnText(2));
    EXPECT_EQ(plan.trigger(), st->ColumnText(3));
    plan.set_id(absl::StrCat(st->ColumnInt(0)));
    out.push_back(std::move(plan));
  }
  return out;
}

std::string Describe(const std::vector<v1::Plan>& plans) {
  std::string out;
  for (const v1::Plan& p : plans) {
    absl::StrAppend(&out, p.id(), " ", p.trigger(), " ", p.diagnosis_class(), " ", p.status(), ": ",
                    p.summary(), " ", p.outcome_reason(), "\n");
    for (const v1::PlannedAction& a : p.actions()) {
      absl::StrAppend(&out, "    ", a.action().ShortDebugString(), "\n");
    }
  }
  return out;
}

bool PipInstalls(const v1::Plan& plan, const std::string& package, const std::string& version) {
  for (const v1::PlannedAction& a : plan.actions()) {
    for (const v1::Requirement& r : a.action().pip_install().requirements()) {
      if (r.name() == package && r.version() == version) return true;
    }
  }
  return false;
}

// `fleet` started, deployed and watched until all READY; its watch and the plans it recorded.
void DeployUntilAllReady(Fleet& fleet, CtlResult* watch, std::vector<v1::Plan>* plans) {
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(*watch = fleet.StartDeployAndWatch());
  ASSERT_EQ(watch->code(), 0) << watch->output << fleet.Diagnostics();
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  *plans = StoredPlans(*db);
}

// The seed scenario on one engine's servers, the probe's test-compile off (policy
// preflight.test_compile: false): the PTX is learnt from the canary's failed start.
void SeedScenarioEndsAllReadyInAFewLaunchesWithEveryStepRecorded(const std::string& engine) {
  e2e::WorldOptions options = e2e::SeedScenarioLearningFromTheCanary();
  options.engine = engine;
  Fleet fleet(options);
  CtlResult watch;
  std::vector<v1::Plan> plans;
  ASSERT_NO_FATAL_FAILURE(DeployUntilAllReady(fleet, &watch, &plans));
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  // The preflight fixed what the probe sees (nvrtc off the loader path, no nvcc, no ninja, the
  // pip layout without lib64 and stub); the PTX that flashinfer emits was learnt from the one
  // failure, and CUDA 13.2 (compiler and headers together: the catch-22) went in as one plan.
  ASSERT_EQ(plans.size(), 2u) << Describe(plans);
  EXPECT_EQ(plans[0].trigger(), "preflight");
  EXPECT_EQ(plans[0].status(), "applied") << Describe(plans);
  for (const char* cause :
       {"missing_shared_library", "nvcc_not_found", "ninja_not_found", "link_error"}) {
    EXPECT_THAT(plans[0].causes(), ::testing::Contains(cause)) << Describe(plans);
  }
  EXPECT_EQ(plans[1].trigger(), "diagnosis");
  EXPECT_EQ(plans[1].diagnosis_class(), "ptx_version_unsupported");
  EXPECT_EQ(plans[1].status(), "applied") << Describe(plans);
  EXPECT_EQ(plans[1].actions_size(), 1) << Describe(plans);
  EXPECT_TRUE(PipInstalls(plans[1], "nvidia-cuda-nvcc", "13.2.78")) << Describe(plans);
  EXPECT_TRUE(PipInstalls(plans[1], "nvidia-cuda-runtime", "13.2.75")) << Describe(plans);
  EXPECT_TRUE(PipInstalls(plans[1], "nvidia-nvvm", "13.2.78")) << Describe(plans);
  EXPECT_FALSE(plans[1].saved_package_set().empty());
  // No plan applied twice; every action ran and succeeded (the actions table agrees).
  std::set<std::string> fingerprints;
  for (const v1::Plan& p : plans) {
    EXPECT_TRUE(fingerprints.insert(p.fingerprint()).second) << Describe(plans);
    ASSERT_EQ(p.results_size(), p.actions_size()) << Describe(plans);
    for (const v1::ActionResult& r : p.results()) EXPECT_TRUE(r.ok()) << r.message();
  }
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM actions WHERE ok = 1"),
            plans[0].actions_size() + plans[1].actions_size());
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM actions WHERE ok IS NOT 1"), 0);

  // Launches: the canary's failure and its restart, then the other seven from the warm cache.
  const std::vector<Struct> attempts = fleet.Attempts();
  EXPECT_LE(attempts.size(), 12u) << watch.output;
  EXPECT_EQ(attempts.size(), 9u);
  int failed = 0;
  for (const Struct& a : attempts) {
    if (Str(a, "outcome") == "failed") {
      ++failed;
      EXPECT_EQ(Str(a, "server"), ServerName(0));
      EXPECT_EQ(Str(a, "diagnosis_class"), "ptx_version_unsupported");
      // The failure is linked to the remediation it triggered.
      EXPECT_EQ(plans[1].attempt_id(), Str(a, "id"));
    } else {
      EXPECT_EQ(Str(a, "outcome"), "ready") << Str(a, "id");
    }
  }
  EXPECT_EQ(failed, 1);
  const auto by_server = ByServer(attempts);
  EXPECT_EQ(Str(by_server.at(ServerName(0)).at(2), "trigger"), "remediation:" + plans[1].id());
  EXPECT_EQ(QueryInt(*db, absl::StrCat("SELECT count(*) FROM remediation_attempts WHERE "
                                       "remediation_id = ",
                                       plans[1].id())),
            1);
  // The seven waited for the canary: none launched before it was READY (its start plus its
  // time to ready; 200 ms for the two clocks that measure them, fleetd's and the agent's).
  auto time_of = [](const Struct& a) {
    absl::Time t;
    std::string err;
    EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, Str(a, "started_at"), &t, &err)) << err;
    return t;
  };
  const Struct& canary = by_server.at(ServerName(0)).at(2);
  ASSERT_EQ(Str(canary, "outcome"), "ready");
  const absl::Time canary_ready =
      time_of(canary) + absl::Milliseconds(Int(canary, "time_to_ready_ms"));
  for (int g = 1; g < 8; ++g) {
    ASSERT_EQ(by_server.at(ServerName(g)).size(), 1u);
    EXPECT_GE(time_of(by_server.at(ServerName(g)).at(1)), canary_ready - absl::Milliseconds(200))
        << ServerName(g);
  }

  // The fleet's events, as `fleetctl events -o json` gives them: one object per line, indexes one
  // apart from 1; the canary's failure, the remediation applied for it, its recovery, and eight
  // servers READY. --since resumes after an index.
  const CtlResult events = fleet.Ctl({"events", "-o", "json"});
  ASSERT_EQ(events.code(), 0) << events.output;
  int64_t next = 1;
  int ready = 0;
  bool canary_failed = false, applied = false, recovered = false;
  for (absl::string_view line : absl::StrSplit(events.output, '\n', absl::SkipEmpty())) {
    const Struct e = ParseJson(std::string(line));
    EXPECT_EQ(Int(e, "index"), next++) << line;
    const std::string type = Str(e, "type");
    if (type == "server_state" && Str(e, "state") == "READY") ++ready;
    if (type == "attempt_finished" && Str(e, "outcome") == "failed") {
      canary_failed =
          Str(e, "class") == "ptx_version_unsupported" && Str(e, "server") == ServerName(0);
    }
    if (type == "remediation" && Str(e, "plan_id") == plans[1].id() &&
        Str(e, "plan_status") == "applied") {
      applied = true;
    }
    if (type == "recovered") {
      recovered = Str(e, "server") == ServerName(0) &&
                  Str(e, "class") == "ptx_version_unsupported" &&
                  Str(e, "trigger") == "remediation";
    }
  }
  EXPECT_EQ(ready, 8) << events.output;
  EXPECT_TRUE(canary_failed) << events.output;
  EXPECT_TRUE(applied) << events.output;
  EXPECT_TRUE(recovered) << events.output;
  const CtlResult last = fleet.Ctl({"events", "--since", std::to_string(next - 2), "-o", "json"});
  ASSERT_EQ(last.code(), 0) << last.output;
  EXPECT_EQ(Int(ParseJson(last.output), "index"), next - 1) << last.output;
}

// On each engine (vllm:FleetE2e.* runs it on vLLM's servers): the same cascade in each engine's
// log shapes, diagnosed and fixed the same.
TEST(FleetE2e, SeedScenarioWithoutTheTestCompileLearnsThePtxFromTheCanarysFailure) {
  SeedScenarioEndsAllReadyInAFewLaunchesWithEveryStepRecorded("");
}

// The seed scenario as it runs by default (issue 19): the probe after the first preflight fix
// test-compiles with the nvcc it installed, sees flashinfer's PTX 9.2 refused by its ptxas, and a
// second preflight round installs CUDA 13.2 whole: 8 launches for 8 GPUs, no failed start.
TEST(FleetE2e, SeedScenarioEndsAllReadyInEightLaunchesWithNoFailedStart) {
  Fleet fleet(e2e::SeedScenario());
  CtlResult watch;
  std::vector<v1::Plan> plans;
  ASSERT_NO_FATAL_FAILURE(DeployUntilAllReady(fleet, &watch, &plans));
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  ASSERT_EQ(plans.size(), 2u) << Describe(plans);
  for (const v1::Plan& p : plans) {
    EXPECT_EQ(p.trigger(), "preflight") << Describe(plans);
    EXPECT_EQ(p.status(), "applied") << Describe(plans);
  }
  // The first round's fix let the test-compile run: what it showed is the next round's cause.
  EXPECT_THAT(plans[0].outcome_reason(), ::testing::HasSubstr("test-compile")) << Describe(plans);
  EXPECT_THAT(plans[0].outcome_reason(), ::testing::HasSubstr("ptx_version_unsupported"));
  EXPECT_TRUE(plans[0].after().test_compile().ran());
  EXPECT_EQ(plans[0].after().test_compile().diagnosis().diagnosis_class(),
            "ptx_version_unsupported");
  EXPECT_THAT(plans[1].causes(), ::testing::Contains("ptx_version_unsupported")) << Describe(plans);
  EXPECT_TRUE(PipInstalls(plans[1], "nvidia-cuda-nvcc", "13.2.78")) << Describe(plans);
  EXPECT_TRUE(PipInstalls(plans[1], "nvidia-cuda-runtime", "13.2.75")) << Describe(plans);
  EXPECT_TRUE(plans[1].after().test_compile().ok()) << plans[1].after().test_compile().log();

  const std::vector<Struct> attempts = fleet.Attempts();
  EXPECT_EQ(attempts.size(), 8u) << watch.output;
  for (const Struct& a : attempts) {
    EXPECT_EQ(Str(a, "outcome"), "ready") << Str(a, "id");
    EXPECT_EQ(Str(a, "trigger"), "initial") << Str(a, "id");
  }
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM attempts WHERE outcome = 'failed'"), 0);
}

struct SingleProblem {
  std::string broken;   // make_sim_world --break
  std::string cause;    // the class the remediation addresses
  std::string trigger;  // preflight: the probe sees it; diagnosis: learnt from a failure
};

class SingleProblemTest : public ::testing::TestWithParam<SingleProblem> {};

TEST_P(SingleProblemTest, IsFixedByOneRemediationAndTheServerStarts) {
  const SingleProblem& p = GetParam();
  Fleet fleet({.gpus = 1, .state = "fixed", .breaks = {p.broken}, .remediation = "auto"});
  ASSERT_TRUE(fleet.ok());
  CtlResult watch;
  ASSERT_NO_FATAL_FAILURE(watch = fleet.StartDeployAndWatch());
  ASSERT_EQ(watch.code(), 0) << watch.output << fleet.Diagnostics();
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  const std::vector<v1::Plan> plans = StoredPlans(*db);
  ASSERT_EQ(plans.size(), 1u) << Describe(plans);
  EXPECT_EQ(plans[0].trigger(), p.trigger) << Describe(plans);
  EXPECT_EQ(plans[0].status(), "applied") << Describe(plans);
  EXPECT_THAT(plans[0].causes(), ::testing::Contains(p.cause)) << Describe(plans);
  const std::vector<Struct> attempts = fleet.Attempts();
  EXPECT_EQ(attempts.size(), p.trigger == "preflight" ? 1u : 2u);
  EXPECT_EQ(Str(attempts.back(), "outcome"), "ready");
}

INSTANTIATE_TEST_SUITE_P(
    FleetE2e, SingleProblemTest,
    ::testing::Values(SingleProblem{"loader_path", "missing_shared_library", "preflight"},
                      SingleProblem{"nvcc", "nvcc_not_found", "preflight"},
                      SingleProblem{"ninja", "ninja_not_found", "preflight"},
                      SingleProblem{"headers", "cuda_header_mismatch", "preflight"},
                      SingleProblem{"link_stub", "link_error", "preflight"},
                      SingleProblem{"ptxas", "ptx_version_unsupported", "preflight"}),
    [](const ::testing::TestParamInfo<SingleProblem>& problem) { return problem.param.broken; });

// A container whose config did not pass GPU 0's device node in: the probe names it where the user
// looks (`fleetctl plan`'s constraints, the agent's log), and nothing is held back (the simulated
// server needs no node, as a real one outside a container may not either).
TEST(FleetE2e, AMissingGpuDeviceNodeIsNamedInThePlanAndTheAgentsLog) {
  Fleet fleet({.gpus = 1, .state = "fixed"});
  ASSERT_TRUE(fleet.ok());
  if (fleet.world().DevRoot().empty()) {
    GTEST_SKIP() << "the world has no device nodes: mknod needs root (tests run as root)";
  }
  const std::string node = fleet.world().DevRoot() + "/nvidia0";
  ASSERT_EQ(unlink(node.c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());
  ASSERT_TRUE(fleet.StatusEventually([](const auto& rows) { return AllInState(rows, 1, "READY"); }))
      << fleet.Diagnostics();

  const CtlResult plan = fleet.Ctl({"plan", ServerName(0)});
  EXPECT_EQ(plan.code(), 0) << plan.output;
  EXPECT_TRUE(absl::StrContains(plan.output, "constraints:")) << plan.output;
  EXPECT_TRUE(absl::StrContains(plan.output, "GPU device nodes must be in the container"))
      << plan.output;
  EXPECT_TRUE(absl::StrContains(plan.output, node + ": missing")) << plan.output;
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(fleet.Join("agent.1.log")),
                                "GPU device nodes: " + node + ": missing"))
      << testing::ReadFile(fleet.Join("agent.1.log"));
}

TEST(FleetE2e, AnOutOfMemoryGetsNoToolchainActionOnlyRetriesThenGivesUp) {
  Fleet fleet({.gpus = 1,
               .state = "fixed",
               .remediation = "auto",
               .policy_yaml = "    max_attempts: 2\n",
               .env = {{"FLEET_SIM_FAULT", "oom"}}});
  ASSERT_TRUE(fleet.ok());
  CtlResult watch;
  ASSERT_NO_FATAL_FAILURE(watch = fleet.StartDeployAndWatch());
  EXPECT_EQ(watch.code(), 2) << watch.output << fleet.Diagnostics();
  // The watch ended on the give-up: the one server is GAVE_UP already, nothing to wait for.
  ASSERT_TRUE(AllInState(fleet.Status(), 1, "GAVE_UP")) << fleet.Diagnostics();
  const Struct row = fleet.Status().at(ServerName(0));
  EXPECT_TRUE(absl::StrContains(Str(row, "reason"), "attempt budget spent (2)"))
      << Str(row, "reason");
  EXPECT_TRUE(absl::StrContains(Str(row, "reason"), "cuda_out_of_memory")) << Str(row, "reason");
  const std::vector<Struct> attempts = fleet.Attempts();
  ASSERT_EQ(attempts.size(), 2u);
  for (const Struct& a : attempts) EXPECT_EQ(Str(a, "diagnosis_class"), "cuda_out_of_memory");
  EXPECT_EQ(Str(attempts[1], "trigger"), "restart");  // after backoff, not after a fix
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  // The preflight found nothing to change in a fixed world, and an OOM is no toolchain problem.
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM remediations"), 0);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM actions"), 0);
}

TEST(FleetE2e, AFixThatCannotBeInstalledIsRecordedFailedAndTheGiveUpSaysWhy) {
  Fleet fleet({.gpus = 1, .state = "fixed", .breaks = {"ptxas"}, .remediation = "auto"});
  ASSERT_TRUE(fleet.ok());
  // The package index has no CUDA 13.2 runtime: the plan's pip install cannot succeed.
  const std::string index_path = fleet.world().Path("sim/pip-index.txt");
  std::string index;
  const std::string original = testing::ReadFile(index_path);  // the lines point into it
  for (std::string_view view : testing::SplitLines(original)) {
    const std::string line(view);
    if (absl::StartsWith(line, "nvidia-cuda-runtime") && absl::StrContains(line, "13.2")) continue;
    absl::StrAppend(&index, line, "\n");
  }
  {
    std::ofstream out(index_path, std::ios::trunc);
    out << index;
  }
  CtlResult watch;
  ASSERT_NO_FATAL_FAILURE(watch = fleet.StartDeployAndWatch());
  EXPECT_EQ(watch.code(), 2) << watch.output << fleet.Diagnostics();
  // The watch ended on the give-up: the one server is GAVE_UP already, nothing to wait for.
  ASSERT_TRUE(AllInState(fleet.Status(), 1, "GAVE_UP")) << fleet.Diagnostics();
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  const std::vector<v1::Plan> plans = StoredPlans(*db);
  ASSERT_GE(plans.size(), 1u);
  EXPECT_EQ(plans[0].status(), "failed") << Describe(plans);
  EXPECT_TRUE(absl::StrContains(plans[0].outcome_reason(), "pip_install failed"))
      << Describe(plans);
  // Never the same plan twice.
  std::set<std::string> fingerprints;
  for (const v1::Plan& p : plans) {
    EXPECT_TRUE(fingerprints.insert(p.fingerprint()).second) << Describe(plans);
  }
  const std::string reason = Str(fleet.Status().at(ServerName(0)), "reason");
  EXPECT_TRUE(absl::StrContains(reason, "ptx_version_unsupported")) << reason;
  EXPECT_EQ(fleet.Attempts().size(), 1u);  // nothing relaunched without a fix that held
}

TEST(FleetE2e, APolicyWithoutAptInstallsNinjaWithPip) {
  Fleet fleet(
      {.gpus = 1,
       .state = "fixed",
       .breaks = {"ninja"},
       .remediation = "auto",
       .policy_yaml = "    allowed_actions: [set_env, prepend_path, pip_install, symlink]\n"});
  ASSERT_TRUE(fleet.ok());
  CtlResult watch;
  ASSERT_NO_FATAL_FAILURE(watch = fleet.StartDeployAndWatch());
  ASSERT_EQ(watch.code(), 0) << watch.output << fleet.Diagnostics();
  auto db = OpenDb(fleet.db_path());
  ASSERT_NE(db, nullptr);
  const std::vector<v1::Plan> plans = StoredPlans(*db);
  ASSERT_EQ(plans.size(), 1u) << Describe(plans);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM actions WHERE kind = 'apt_install'"), 0);
  bool pip_ninja = false;
  for (const v1::PlannedAction& a : plans[0].actions()) {
    for (const v1::Requirement& r : a.action().pip_install().requirements()) {
      pip_ninja = pip_ninja || r.name() == "ninja";
    }
  }
  EXPECT_TRUE(pip_ninja) << Describe(plans);
  // The world's apt-get was never run.
  EXPECT_EQ(testing::ReadFile(fleet.world().Path("sim/apt-installed")), "");
}

// A row of fleet.db's deliveries (the webhooks' record).
struct DeliveryRow {
  std::string event_type;
  std::string server;
  std::string status;
  int64_t attempts = 0;
  int64_t http_status = 0;
  std::string error;
  std::string body;
};

std::vector<DeliveryRow> DeliveryRows(const std::string& db_path) {
  std::vector<DeliveryRow> rows;
  auto db = OpenDb(db_path);
  if (db == nullptr) return rows;
  auto st = db->Prepare(
      "SELECT event_type, server, status, attempts, coalesce(http_status, 0), error, body "
      "FROM deliveries ORDER BY id");
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return rows;
  while (true) {
    auto more = st->Step();
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    rows.push_back({st->ColumnText(0), st->ColumnText(1), st->ColumnText(2), st->ColumnInt(3),
                    st->ColumnInt(4), st->ColumnText(5), st->ColumnText(6)});
  }
  return rows;
}

std::string HmacHex(const std::string& key, const std::string& body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &length);
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(mac), length));
}

// 7. Webhooks: a server that gives up is POSTed to the config's receiver (a real HTTP server in
// the test) with its class and the command to run, signed, and recorded delivered in fleet.db.
// Then the receiver hangs with the connection open: fleetd still answers fleetctl at once, the
// delivery waits pending, and once the receiver answers again (a 503, then 200) it is retried
// and recorded delivered on its second try.
TEST(FleetE2e, AGiveUpIsPostedToTheWebhookAndAHangingReceiverHoldsNothing) {
  auto receiver = testing::WebhookReceiver::Start();
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  testing::TempDir keys;
  keys.WriteFile("webhook.key", "e2e key\n");
  Fleet fleet({.gpus = 1,
               .state = "fixed",
               .breaks = {"ptxas"},  // every start fails; remediation off: it gives up at once
               .extra_yaml = absl::StrCat("notify:\n"
                                          "  - name: oncall\n"
                                          "    url: ",
                                          (*receiver)->url(),
                                          "\n"
                                          "    events: [gave_up]\n"
                                          "    secret_file: ",
                                          Quoted(keys.Join("webhook.key")),
                                          "\n"
                                          "    timeout: 60s\n")});
  ASSERT_TRUE(fleet.ok());
  ASSERT_NO_FATAL_FAILURE(fleet.StartAgent());
  ASSERT_NO_FATAL_FAILURE(fleet.StartFleetd());
  ASSERT_NO_FATAL_FAILURE(fleet.Deploy());

  ASSERT_TRUE((*receiver)->WaitForRequests(1, absl::Seconds(60))) << fleet.Diagnostics();
  const testing::ReceivedRequest first = (*receiver)->Requests()[0];
  EXPECT_EQ(first.headers.at("x-fleet-event"), "gave_up");
  EXPECT_EQ(first.headers.at("x-fleet-signature-256"), "sha256=" + HmacHex("e2e key", first.body));
  const Struct body = ParseJson(first.body);
  EXPECT_EQ(Str(body, "type"), "gave_up");
  EXPECT_EQ(Str(body, "server"), ServerName(0));
  EXPECT_EQ(Str(body, "state"), "GAVE_UP");
  EXPECT_EQ(Str(body, "class"), "ptx_version_unsupported");
  EXPECT_EQ(Str(body, "command"), "fleetctl explain --server " + ServerName(0));
  EXPECT_TRUE(absl::StrContains(Str(body, "root_cause_line"), "Unsupported .version 9.2"))
      << first.body;
  EXPECT_TRUE(absl::StrContains(Str(body, "text"), "ptx_version_unsupported")) << first.body;
  ASSERT_TRUE(Eventually([&] {
    const std::vector<DeliveryRow> rows = DeliveryRows(fleet.db_path());
    return rows.size() == 1 && rows[0].status == "delivered";
  })) << fleet.Diagnostics();
  {
    const DeliveryRow row = DeliveryRows(fleet.db_path())[0];
    EXPECT_EQ(row.event_type, "gave_up");
    EXPECT_EQ(row.server, ServerName(0));
    EXPECT_EQ(row.attempts, 1);
    EXPECT_EQ(row.http_status, 200);
    EXPECT_EQ(row.body, first.body);
  }

  // The receiver hangs; a restart gives up again and its delivery waits on the open connection.
  (*receiver)->Hold();
  ASSERT_EQ(fleet.Ctl({"restart", ServerName(0)}).code(), 0);
  ASSERT_TRUE((*receiver)->WaitForHeld(1, absl::Seconds(60))) << fleet.Diagnostics();
  // fleetd answers as ever (fleetctl's default 10 s deadline; the POST may hang for 60 s).
  const auto asked = SteadyClock::now();
  const CtlResult status = fleet.Ctl({"status", "-o", "json"}, std::chrono::seconds(10));
  EXPECT_EQ(status.code(), 0) << status.output;
  EXPECT_LT(SteadyClock::now() - asked, std::chrono::seconds(10));
  EXPECT_TRUE(AllInState(fleet.Status(), 1, "GAVE_UP")) << fleet.Diagnostics();
  {
    // Made in the commit of its event, pending while the receiver holds it.
    const std::vector<DeliveryRow> rows = DeliveryRows(fleet.db_path());
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[1].status, "pending");
    EXPECT_EQ(rows[1].attempts, 0);
  }

  // The receiver comes back: the held request is answered 503, the retry 200.
  (*receiver)->AnswerNext({503});
  (*receiver)->Release();
  ASSERT_TRUE(Eventually([&] {
    const std::vector<DeliveryRow> rows = DeliveryRows(fleet.db_path());
    return rows.size() == 2 && rows[1].status == "delivered";
  })) << fleet.Diagnostics();
  const DeliveryRow retried = DeliveryRows(fleet.db_path())[1];
  EXPECT_EQ(retried.attempts, 2);
  EXPECT_EQ(retried.http_status, 200);
  const std::vector<testing::ReceivedRequest> got = (*receiver)->Requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].body, retried.body);
  EXPECT_EQ(got[2].body, retried.body);
  EXPECT_EQ(got[1].headers.at("x-fleet-delivery"), got[2].headers.at("x-fleet-delivery"));
}

}  // namespace
}  // namespace fleet

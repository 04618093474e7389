#include "cli/status_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/status_format.h"
#include "cli/text_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_test_data.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using fleet::cli::testing::kFlashinferOp;

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::MakeRow;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class StatusCommandTest : public ::testing::Test {
 protected:
  v1::ServerRow Row(const std::string& server, const std::string& state) {
    return MakeRow(server, state, env_.clock().Now());
  }
  v1::FleetStatusResponse Message(std::vector<v1::ServerRow> rows, int at_offset_s = 0) {
    v1::FleetStatusResponse m;
    for (v1::ServerRow& r : rows) *m.add_servers() = std::move(r);
    ToProtoTime(env_.clock().Now() + absl::Seconds(at_offset_s), m.mutable_at());
    return m;
  }
  std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    return lines;
  }

  FakeFleetEnv env_;
};

TEST_F(StatusCommandTest, TableShowsEachServer) {
  v1::ServerRow jit = Row("pve1/200/gpu3", "JIT_COMPILING");
  jit.set_phase_detail("flashinfer JIT");
  jit.set_progress_step(30);
  jit.set_progress_total(40);
  v1::ServerRow failed = Row("pve1/200/gpu4", "FAILED");
  failed.set_last_diagnosis_class("ptx_version_unsupported");
  env_.service().SetStatus(Message({jit, failed}));
  const auto o = env_.Run(RunStatus, {});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "SERVER         STATE          PHASE           PROGRESS            ELAPSED  ATTEMPT  "
            "DIAGNOSIS\n"
            "pve1/200/gpu3  JIT_COMPILING  flashinfer JIT  [#######...] 30/40  1m15s    1        "
            "-\n"
            "pve1/200/gpu4  FAILED         -               -                   1m15s    1        "
            "ptx_version_unsupported\n");
  EXPECT_EQ(o.err, "");
}

TEST_F(StatusCommandTest, SendsTheServersAskedFor) {
  env_.service().SetStatus(Message({Row("pve1/200/gpu3", "READY")}));
  const auto o = env_.Run(RunStatus, {"pve1/200/gpu3", "-o", "name"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "pve1/200/gpu3\n");
  ASSERT_EQ(env_.service().status_requests().size(), 1u);
  EXPECT_THAT(env_.service().status_requests()[0].servers(), ElementsAre("pve1/200/gpu3"));
}

TEST_F(StatusCommandTest, WideAddsPortGpusSinceSummaryReason) {
  v1::ServerRow row = Row("pve1/200/gpu3", "GAVE_UP");
  row.set_last_diagnosis_class("cuda_out_of_memory");
  row.set_last_diagnosis_summary("the GPU ran out of memory");
  row.set_reason("report only");
  env_.service().SetStatus(Message({row}));
  const auto o = env_.Run(RunStatus, {"-o", "wide"});
  EXPECT_EQ(o.code, 0);
  const std::vector<std::string> lines = Lines(o.out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0],
              HasSubstr("DIAGNOSIS           PORT   GPUS  SINCE  SUMMARY                    "
                        "REASON"));
  EXPECT_THAT(lines[1],
              HasSubstr("cuda_out_of_memory  30000  3     5s     the GPU ran out of memory  "
                        "report only"));
}

TEST_F(StatusCommandTest, JsonIsOneObjectWithTheDocumentedFields) {
  env_.service().SetStatus(Message({Row("local/200/gpu0", "READY")}));
  const auto o = env_.Run(RunStatus, {"-o", "json"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out,
            "{\"at\":\"2027-01-15T08:00:00Z\",\"servers\":[{\"server\":\"local/200/gpu0\","
            "\"state\":\"READY\",\"phase_detail\":\"\",\"progress_step\":0,\"progress_total\":0,"
            "\"attempt_number\":1,\"state_since\":\"2027-01-15T07:59:55Z\",\"attempt_started_at\":"
            "\"2027-01-15T07:58:45Z\",\"last_diagnosis_class\":\"\",\"last_diagnosis_summary\":"
            "\"\",\"port\":30000,\"gpus\":[0],\"degraded\":false,\"reason\":\"\"}],\"removed\":"
            "[]}\n");
}

TEST_F(StatusCommandTest, ATensorParallelServerIsOneRowWithItsGpus) {
  v1::ServerRow tp = Row("pve1/200/gpu0", "READY");
  tp.add_gpus(0);
  tp.add_gpus(1);
  v1::ServerRow one = Row("pve1/200/gpu2", "READY");
  one.add_gpus(2);
  env_.service().SetStatus(Message({tp, one}));
  auto o = env_.Run(RunStatus, {});
  EXPECT_EQ(o.code, 0);
  std::vector<std::string> lines = Lines(o.out);
  ASSERT_EQ(lines.size(), 3u) << o.out;
  EXPECT_THAT(lines[0], HasSubstr("DIAGNOSIS  GPUS"));
  EXPECT_THAT(lines[1], ::testing::StartsWith("pve1/200/gpu0 "));
  EXPECT_THAT(lines[1], ::testing::EndsWith(" 0,1"));
  EXPECT_THAT(lines[2], ::testing::EndsWith(" 2"));
  o = env_.Run(RunStatus, {"-o", "json"});
  EXPECT_THAT(o.out, HasSubstr("\"server\":\"pve1/200/gpu0\""));
  EXPECT_THAT(o.out, HasSubstr("\"gpus\":[0,1]"));
  // One GPU each: no GPUS column (the name says it).
  env_.service().SetStatus(Message({one}));
  o = env_.Run(RunStatus, {});
  EXPECT_THAT(o.out, Not(HasSubstr("GPUS")));
}

TEST_F(StatusCommandTest, EmptyFleetSaysSo) {
  env_.service().SetStatus(Message({}));
  const auto o = env_.Run(RunStatus, {});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "");
  EXPECT_THAT(o.err, HasSubstr("no servers"));
}

TEST_F(StatusCommandTest, BadServerNameIsRejectedBeforeAnyCall) {
  const auto o = env_.Run(RunStatus, {"pve1/200/3"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl status: server name 'pve1/200/3': the last part must be "
                                "gpuN"));
  EXPECT_TRUE(env_.service().status_requests().empty());
}

TEST_F(StatusCommandTest, UsageErrors) {
  EXPECT_EQ(env_.Run(RunStatus, {"-o", "yaml"}).code, 1);
  EXPECT_EQ(env_.Run(RunStatus, {"--watch", "-o", "name"}).code, 1);
  EXPECT_EQ(env_.Run(RunStatus, {"--bogus"}).code, 1);
  const auto help = env_.Run(RunStatus, {"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: fleetctl status"));
}

TEST_F(StatusCommandTest, DaemonErrorIsReportedWithItsMessage) {
  env_.service().SetError(absl::NotFoundError("unknown server pve1/200/gpu9"));
  const auto o = env_.Run(RunStatus, {"pve1/200/gpu9"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl status: unknown server pve1/200/gpu9\n");
}

// Off a terminal, --watch prints one line per change: the first table, then each row that
// changed, and nothing for a message that repeats what was shown.
TEST_F(StatusCommandTest, WatchOffTerminalPrintsOneLinePerChange) {
  v1::ServerRow a = Row("pve1/200/gpu0", "LOADING");
  v1::ServerRow b = Row("pve1/200/gpu1", "LOADING");
  std::vector<v1::FleetStatusResponse> script;
  script.push_back(Message({a, b}, 0));
  a.set_state("JIT_COMPILING");
  a.set_progress_step(3);
  a.set_progress_total(40);
  script.push_back(Message({a}, 1));
  script.push_back(Message({a, b}, 2));  // the whole table again, unchanged
  b.set_state("FAILED");
  b.set_last_diagnosis_class("ptx_version_unsupported");
  script.push_back(Message({a, b}, 3));
  v1::FleetStatusResponse removal = Message({}, 4);
  removal.add_removed("pve1/200/gpu1");
  script.push_back(removal);
  env_.service().SetWatchScript(script, /*hold_open=*/false);
  const auto o = env_.Run(RunStatus, {"--watch"});
  EXPECT_THAT(Lines(o.out),
              ElementsAre("2027-01-15T08:00:00Z pve1/200/gpu0 LOADING attempt=1",
                          "2027-01-15T08:00:00Z pve1/200/gpu1 LOADING attempt=1",
                          "2027-01-15T08:00:01Z pve1/200/gpu0 JIT_COMPILING progress=3/40 "
                          "attempt=1",
                          "2027-01-15T08:00:03Z pve1/200/gpu1 FAILED attempt=1 "
                          "diagnosis=ptx_version_unsupported",
                          "2027-01-15T08:00:04Z pve1/200/gpu1 REMOVED"));
  EXPECT_THAT(o.out, Not(HasSubstr("\x1b[")));
  // The daemon ended the stream: a watcher is told, and fails.
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl status: fleetd ended the watch\n");
}

TEST_F(StatusCommandTest, UntilReadyExitsZeroWhenAllAreReadyAndCancelsTheWatch) {
  v1::ServerRow a = Row("pve1/200/gpu0", "JIT_COMPILING");
  v1::ServerRow b = Row("pve1/200/gpu1", "READY");
  std::vector<v1::FleetStatusResponse> script = {Message({a, b})};
  a.set_state("READY");
  script.push_back(Message({a}, 1));
  env_.service().SetWatchScript(script, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--watch", "--until-ready"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(Lines(o.out), ElementsAre(StartsWith("2027-01-15T08:00:00Z pve1/200/gpu0 JIT_"),
                                        StartsWith("2027-01-15T08:00:00Z pve1/200/gpu1 READY"),
                                        StartsWith("2027-01-15T08:00:01Z pve1/200/gpu0 READY")));
  EXPECT_EQ(o.err, "");
}

TEST_F(StatusCommandTest, UntilReadyExitsTwoAndSaysWhichGaveUp) {
  v1::ServerRow a = Row("pve1/200/gpu0", "READY");
  v1::ServerRow b = Row("pve1/200/gpu1", "REMEDIATING");
  std::vector<v1::FleetStatusResponse> script = {Message({a, b})};
  b.set_state("GAVE_UP");
  b.set_reason("cuda_out_of_memory: not a toolchain problem");
  script.push_back(Message({b}, 1));
  env_.service().SetWatchScript(script, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--until-ready", "-o", "json"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err,
            "fleetctl status: pve1/200/gpu1 gave up: cuda_out_of_memory: not a toolchain "
            "problem\n");
  // Without --watch only the final table is printed.
  const std::vector<std::string> lines = Lines(o.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], StartsWith("{\"at\":\"2027-01-15T08:00:01Z\",\"servers\":[{\"server\":"
                                   "\"pve1/200/gpu0\",\"state\":\"READY\""));
  EXPECT_THAT(lines[0], HasSubstr("\"state\":\"GAVE_UP\""));
}

TEST_F(StatusCommandTest, UntilReadyKeepsWaitingThroughFailures) {
  v1::ServerRow a = Row("pve1/200/gpu0", "FAILED");
  std::vector<v1::FleetStatusResponse> script = {Message({a})};
  for (const char* state : {"REMEDIATING", "RESTARTING", "STARTING", "READY"}) {
    a.set_state(state);
    script.push_back(Message({a}));
  }
  env_.service().SetWatchScript(script, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--until-ready"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("pve1/200/gpu0  READY"));
}

TEST_F(StatusCommandTest, WatchJsonIsOneObjectPerChange) {
  v1::ServerRow a = Row("pve1/200/gpu0", "LOADING");
  v1::ServerRow b = Row("pve1/200/gpu1", "LOADING");
  std::vector<v1::FleetStatusResponse> script = {Message({a, b})};
  script.push_back(Message({a, b}, 1));  // no change: no line
  b.set_state("READY");
  a.set_state("READY");
  script.push_back(Message({b, a}, 2));
  env_.service().SetWatchScript(script, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--watch", "--until-ready", "-o", "json"});
  EXPECT_EQ(o.code, 0);
  const std::vector<std::string> lines = Lines(o.out);
  ASSERT_EQ(lines.size(), 2u) << o.out;
  EXPECT_THAT(lines[0], HasSubstr("\"server\":\"pve1/200/gpu0\""));
  EXPECT_THAT(lines[0], HasSubstr("\"server\":\"pve1/200/gpu1\""));
  EXPECT_THAT(lines[1], StartsWith("{\"at\":\"2027-01-15T08:00:02Z\",\"servers\":[{\"server\":"
                                   "\"pve1/200/gpu1\",\"state\":\"READY\""));
}

// On a terminal: a header and the table, each later frame drawn over the previous one with ANSI
// cursor movement, states in colour.
TEST_F(StatusCommandTest, WatchOnTerminalRedrawsInPlaceInColour) {
  v1::ServerRow a = Row("pve1/200/gpu0", "LOADING");
  std::vector<v1::FleetStatusResponse> script = {Message({a})};
  a.set_state("READY");
  script.push_back(Message({a}, 1));
  env_.service().SetWatchScript(script, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--watch", "--until-ready"}, {.tty = true});
  EXPECT_EQ(o.code, 0);
  const std::string frame1 =
      "1 server: 1 LOADING   08:00:00\n"
      "SERVER         STATE    PHASE  PROGRESS  ELAPSED  ATTEMPT  DIAGNOSIS\n"
      "pve1/200/gpu0  \x1b[36mLOADING\x1b[0m  -      -         1m15s    1        -\n";
  const std::string frame2 =
      "\r\x1b[3A\x1b[J"
      "1 server: 1 READY   08:00:00\n"
      "SERVER         STATE  PHASE  PROGRESS  ELAPSED  ATTEMPT  DIAGNOSIS\n"
      "pve1/200/gpu0  \x1b[32mREADY\x1b[0m  -      -         1m15s    1        -\n";
  EXPECT_EQ(o.out, frame1 + frame2 + "all 1 server ready\n");
}

TEST_F(StatusCommandTest, NoColorIsHonouredOnATerminal) {
  env_.service().SetStatus(Message({Row("pve1/200/gpu0", "READY")}));
  const auto colored = env_.Run(RunStatus, {}, {.tty = true});
  EXPECT_THAT(colored.out, HasSubstr("\x1b[32mREADY\x1b[0m"));
  const auto plain = env_.Run(RunStatus, {}, {.tty = true, .no_color = true});
  EXPECT_THAT(plain.out, HasSubstr("READY"));
  EXPECT_THAT(plain.out, Not(HasSubstr("\x1b[")));
  const auto not_tty = env_.Run(RunStatus, {});
  EXPECT_THAT(not_tty.out, Not(HasSubstr("\x1b[")));
}

// The characters a terminal shows for `line`: its SGR escapes take none.
size_t Shown(const std::string& line) {
  std::string plain = line;
  for (size_t at; (at = plain.find("\x1b[")) != std::string::npos;) {
    plain.erase(at, plain.find('m', at) - at + 1);
  }
  return DisplayWidth(plain);
}

// On a terminal the table fits its width (the op name loses its middle, the right-hand columns
// stay); into a pipe, and with -o wide, every text is whole.
TEST_F(StatusCommandTest, TableOnATerminalFitsItsWidth) {
  v1::ServerRow jit = Row("pve1/200/gpu0", "JIT_COMPILING");
  jit.set_phase_detail(kFlashinferOp);
  jit.set_progress_step(30);
  jit.set_progress_total(40);
  jit.set_last_diagnosis_class("ptx_version_unsupported");
  env_.service().SetStatus(Message({jit}));
  for (int width : {80, 120}) {
    const auto o = env_.Run(RunStatus, {}, {.tty = true, .terminal_width = width});
    EXPECT_EQ(o.code, 0) << o.err;
    const std::vector<std::string> lines = Lines(o.out);
    ASSERT_EQ(lines.size(), 2u);
    for (const std::string& line : lines) EXPECT_LE(Shown(line), static_cast<size_t>(width));
    EXPECT_THAT(lines[0], HasSubstr("ATTEMPT  DIAGNOSIS"));
    EXPECT_THAT(lines[1], HasSubstr("\xe2\x80\xa6"));
    EXPECT_THAT(lines[1], HasSubstr("30/40"));
    EXPECT_THAT(o.out, Not(HasSubstr(kFlashinferOp)));
  }
  const auto piped = env_.Run(RunStatus, {}, {.terminal_width = 80});
  EXPECT_THAT(piped.out, HasSubstr(kFlashinferOp));
  const auto wide = env_.Run(RunStatus, {"-o", "wide"}, {.tty = true, .terminal_width = 80});
  EXPECT_THAT(wide.out, HasSubstr(kFlashinferOp));
}

// -o wide on a terminal draws whole lines, which the terminal wraps: the next frame goes back
// over every row they took.
TEST_F(StatusCommandTest, WatchWideRedrawGoesBackOverWrappedLines) {
  v1::ServerRow a = Row("pve1/200/gpu0", "JIT_COMPILING");
  a.set_phase_detail(kFlashinferOp);
  std::vector<v1::FleetStatusResponse> script = {Message({a})};
  a.set_state("READY");
  a.clear_phase_detail();
  script.push_back(Message({a}, 1));
  env_.service().SetWatchScript(script, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--watch", "--until-ready", "-o", "wide"},
                          {.tty = true, .terminal_width = 80});
  EXPECT_EQ(o.code, 0) << o.err;
  const size_t second = o.out.find("\r\x1b[");
  ASSERT_NE(second, std::string::npos) << o.out;
  int rows = 0;
  for (const std::string& line : Lines(o.out.substr(0, second))) {
    rows += static_cast<int>(std::max<size_t>(1, (Shown(line) + 79) / 80));
  }
  EXPECT_GT(rows, 3);  // the wide row is longer than 80 characters
  EXPECT_THAT(o.out.substr(second), StartsWith(absl::StrCat("\r\x1b[", rows, "A\x1b[J")));
  EXPECT_THAT(o.out, HasSubstr(kFlashinferOp));
}

TEST_F(StatusCommandTest, UnreachableDaemonIsOneClearLine) {
  const auto o = env_.Run(RunStatus, {}, {.socket_path = env_.dir().Join("nope.sock")});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl: cannot reach fleetd at unix:" + env_.dir().Join("nope.sock") +
                       ": no such socket (is fleetd running? --socket, --state-dir or "
                       "FLEET_SOCKET name another)\n");
  const auto w = env_.Run(RunStatus, {"--watch"}, {.socket_path = env_.dir().Join("nope.sock")});
  EXPECT_EQ(w.code, 1);
  EXPECT_THAT(w.err, StartsWith("fleetctl: cannot reach fleetd at unix:"));
}

TEST_F(StatusCommandTest, WatchThatNeverAnswersHitsTheDeadline) {
  env_.service().SetWatchScript({}, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--watch"}, {.timeout = absl::Milliseconds(200)});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err,
            "fleetctl: fleetd at unix:" + env_.socket_path() + " did not answer within 200ms\n");
}

}  // namespace
}  // namespace fleet::cli

// `status --watch` as a person sees it: the real fleetctl in a real terminal (tmux, at 80 and 120
// columns) against the fake fleetd, the screen read back with `tmux capture-pane`. Checks what the
// unit tests of the fitting cannot: that the terminal shows no line wider than itself, that the
// right-hand columns are on screen, and that NO_COLOR leaves no escape on it.
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "cli/status_format.h"
#include "cli/text_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_test_data.h"
#include "tests/testing/fake_fleet_service.h"
#include "tests/testing/subprocess.h"

namespace fleet::cli {
namespace {

using fleet::cli::testing::kFlashinferOp;

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::MakeRow;
using ::fleet::testing::BuildPath;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kEllipsis[] = "\xe2\x80\xa6";

// `text` without its SGR escapes.
std::string Plain(std::string text) {
  for (size_t at; (at = text.find("\x1b[")) != std::string::npos;) {
    const size_t end = text.find_first_of(
        "@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~", at + 2);
    text.erase(at, end == std::string::npos ? std::string::npos : end - at + 1);
  }
  return text;
}

// One tmux server of its own (its socket in the test's temp dir), one session running fleetctl.
class TmuxSession {
 public:
  TmuxSession(const fleet::testing::TempDir& dir, std::string name,
              std::map<std::string, std::string> env)
      : socket_(dir.Join(name + ".tmux")), output_(dir.Join(name + ".out")), env_(std::move(env)) {
    // Keep the pane when fleetctl exits, so a failure shows what it printed.
    config_ = dir.Join(name + ".conf");
    dir.WriteFile(name + ".conf", "set-option -g remain-on-exit on\n");
  }
  ~TmuxSession() { (void)Tmux({"kill-server"}); }

  absl::StatusOr<fleet::testing::RunResult> Tmux(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"tmux", "-u", "-f", config_, "-S", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    std::remove(output_.c_str());
    return fleet::testing::Run(argv, {.env = env_, .output_path = output_});
  }

  // The screen, with colours as escapes (`-e`).
  std::string Capture() {
    auto r = Tmux({"capture-pane", "-p", "-e", "-t", "fleet"});
    return r.ok() && r->exited && r->exit_code == 0 ? r->output : "";
  }

 private:
  std::string socket_, output_, config_;
  std::map<std::string, std::string> env_;
};

class StatusTerminalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (fleet::testing::FindOnPath("tmux", fleet::testing::CurrentEnvironment()["PATH"]).empty()) {
      GTEST_SKIP() << "tmux is not installed (deploy/install-deps.sh installs it): the "
                      "real-terminal test of status --watch is skipped";
    }
    // The canary JIT-compiles flashinfer's op, another server waits for it, a third container
    // applies plan 7.
    const absl::Time now = absl::Now();  // fleetctl's clock is the real one
    v1::FleetStatusResponse table;
    v1::ServerRow* jit = table.add_servers();
    *jit = MakeRow("pve1/200/gpu0", "JIT_COMPILING", now);
    jit->set_phase_detail(kFlashinferOp);
    jit->set_progress_step(30);
    jit->set_progress_total(40);
    v1::ServerRow* waiting = table.add_servers();
    *waiting = MakeRow("pve1/200/gpu1", "PENDING", now);
    waiting->set_attempt_number(0);
    waiting->set_reason(
        "waiting: the canary pve1/200/gpu0 builds the JIT cache first (the rest start from it)");
    v1::ServerRow* fixing = table.add_servers();
    *fixing = MakeRow("pve1/201/gpu0", "REMEDIATING", now);
    fixing->set_last_diagnosis_class("ptx_version_unsupported");
    fixing->set_reason("remediating: ptx_version_unsupported");
    env_.service().SetWatchScript({table}, /*hold_open=*/true);
    v1::ListRemediationsResponse plans;
    v1::Plan* plan = plans.add_plans();
    plan->set_id("7");
    plan->set_container("pve1/201");
    plan->set_server("pve1/201/gpu0");
    plan->set_status("applying");
    plan->set_summary("pip install nvidia-cuda-nvcc==13.2.78 so that ptxas accepts PTX ISA 9.2");
    plan->mutable_created_at()->set_seconds(absl::ToUnixSeconds(now) - 120);
    env_.service().SetRemediations(plans);
  }

  // Runs `fleetctl status --watch` in a `columns`-wide pane and returns the first screen on which
  // `ready` holds (or the last one seen when the deadline passed).
  std::string WatchScreen(TmuxSession& tmux, int columns,
                          const std::function<bool(const std::string&)>& ready) {
    auto started =
        tmux.Tmux({"new-session", "-d", "-s", "fleet", "-x", std::to_string(columns), "-y", "40",
                   BuildPath("cli/fleetctl"), "--socket", env_.socket_path(), "status", "--watch"});
    EXPECT_TRUE(started.ok() && started->exit_code == 0)
        << (started.ok() ? started->output : started.status().ToString());
    std::string screen;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      screen = tmux.Capture();
      if (ready(screen)) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return screen;
  }

  std::map<std::string, std::string> Environment(bool no_color) {
    std::map<std::string, std::string> env = fleet::testing::CurrentEnvironment();
    env.erase("NO_COLOR");
    env.erase("TMUX");  // a test run from inside tmux must not talk to the user's server
    env.erase("COLUMNS");
    env["LC_ALL"] = "C.UTF-8";
    if (no_color) env["NO_COLOR"] = "1";
    return env;
  }

  // What every screen must show: the table, no line wider than the pane, every column header, the
  // op name's start and end around the ellipsis, the progress's n/m.
  void ExpectFitted(const std::string& screen, int columns) {
    const std::string plain = Plain(screen);
    ASSERT_THAT(plain, HasSubstr("SERVER")) << screen;
    for (absl::string_view line : absl::StrSplit(plain, '\n')) {
      EXPECT_LE(DisplayWidth(std::string_view(line.data(), line.size())),
                static_cast<size_t>(columns))
          << line;
    }
    EXPECT_THAT(plain, ContainsRegex("STATE +PHASE +PROGRESS +ELAPSED +ATTEMPT +DIAGNOSIS"));
    EXPECT_THAT(plain, ContainsRegex(absl::StrCat("JIT_COMPILING +ba[a-z_]*", kEllipsis,
                                                  "[A-Za-z0-9_]*120 .*30/40")));
    EXPECT_THAT(plain, Not(HasSubstr(kFlashinferOp)));
  }

  FakeFleetEnv env_;
};

TEST_F(StatusTerminalTest, At80ColumnsTheRightHandColumnsStayOnScreenInColour) {
  TmuxSession tmux(env_.dir(), "c80", Environment(/*no_color=*/false));
  const std::string screen = WatchScreen(tmux, 80, [](const std::string& s) {
    return absl::StrContains(s, "DIAGNOSIS") && absl::StrContains(s, "REMEDIATING");
  });
  ExpectFitted(screen, 80);
  // The state is coloured (tmux writes the pane's colours back as its own SGR escapes).
  EXPECT_THAT(screen, ContainsRegex("\x1b\\[[0-9;]*m(\x1b\\[[0-9;]*m)*JIT_COMPILING"));
}

TEST_F(StatusTerminalTest, NoColorLeavesNoEscapeOnTheScreen) {
  TmuxSession tmux(env_.dir(), "n80", Environment(/*no_color=*/true));
  const std::string screen = WatchScreen(tmux, 80, [](const std::string& s) {
    return absl::StrContains(s, "DIAGNOSIS") && absl::StrContains(s, "REMEDIATING");
  });
  ExpectFitted(screen, 80);
  EXPECT_THAT(screen, Not(HasSubstr("\x1b"))) << screen;
}

TEST_F(StatusTerminalTest, At120ColumnsTheRemediationSaysWhatRuns) {
  TmuxSession tmux(env_.dir(), "c120", Environment(/*no_color=*/false));
  const std::string screen = WatchScreen(
      tmux, 120, [](const std::string& s) { return absl::StrContains(s, "remediation 7"); });
  ExpectFitted(screen, 120);
  const std::string plain = Plain(screen);
  EXPECT_THAT(plain, HasSubstr("batch_prefill"));
  EXPECT_THAT(plain, HasSubstr("False_sm120"));
  EXPECT_THAT(plain, HasSubstr("[#######...] 30/40"));
  EXPECT_THAT(plain, ContainsRegex("REMEDIATING +remediation 7, 2m0[0-9]s"));
  EXPECT_THAT(plain, HasSubstr("ptx_version_unsupported"));
  EXPECT_THAT(screen, ContainsRegex("\x1b\\[[0-9;]*m(\x1b\\[[0-9;]*m)*REMEDIATING"));
}

}  // namespace
}  // namespace fleet::cli

// `fleetctl explain --server` renders a stored diagnosis exactly as `fleetctl explain FILE`
// renders the log it came from: same text, same JSON object, with `file` being SERVER#N.
#include "absl/strings/str_replace.h"
#include "cli/explain_command.h"
#include "common/diagnosis/diagnosis_proto.h"
#include "common/diagnosis/log_file.h"
#include "common/diagnosis/signature_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_test_data.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using fleet::cli::testing::Explain;

using ::fleet::cli::testing::FakeFleetEnv;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kLog[] =
    "[2026-01-01 10:00:00] Loading weights\n"
    "[1/3] c++ -c a.cpp\n"
    "FAILED: [code=1] flashinfer/x.cuda.o\n"
    "ptxas fatal   : Unsupported .version 9.2; current version is '9.0'\n"
    "ninja: build stopped: subcommand failed.\n"
    "Received sigquit from a child process. It usually means the child failed.\n";

class ServerExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.dir().WriteFile("gpu3.log", kLog);
    log_path_ = env_.dir().Join("gpu3.log");
    diagnosis::ClassifierOptions options;
    options.offline = true;
    auto d = diagnosis::ClassifyFile(log_path_, diagnosis::SignatureMatcher::Builtin(), options);
    ASSERT_TRUE(d.ok()) << d.status();
    v1::ExplainResponse response;
    response.mutable_attempt()->set_server("pve1/200/gpu3");
    response.mutable_attempt()->set_number(2);
    response.mutable_attempt()->set_outcome("failed");
    diagnosis::ToProto(*d, response.mutable_diagnosis());
    env_.service().SetExplain(response);
  }

  std::string FileExplain(const std::vector<std::string>& extra, bool tty = false) {
    std::vector<std::string> args = extra;
    args.push_back(log_path_);
    const auto o = env_.Run(Explain, args, {.tty = tty});
    EXPECT_EQ(o.code, 0) << o.err;
    return absl::StrReplaceAll(o.out, {{log_path_, "pve1/200/gpu3#2"}});
  }

  FakeFleetEnv env_;
  std::string log_path_;
};

TEST_F(ServerExplainTest, TextIsTheFileReport) {
  const auto o = env_.Run(Explain, {"--server", "pve1/200/gpu3"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, FileExplain({}));
  EXPECT_THAT(o.out, HasSubstr("ptx_version_unsupported"));
  EXPECT_THAT(o.out, HasSubstr("pve1/200/gpu3#2"));
  ASSERT_EQ(env_.service().explain_requests().size(), 1u);
  EXPECT_EQ(env_.service().explain_requests()[0].server(), "pve1/200/gpu3");
  EXPECT_EQ(env_.service().explain_requests()[0].attempt_number(), 0);
}

TEST_F(ServerExplainTest, JsonIsTheFileObjectWithServerAndAttempt) {
  const auto o = env_.Run(Explain, {"--server", "pve1/200/gpu3", "--attempt", "2", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, FileExplain({"-o", "json"}));
  EXPECT_THAT(o.out,
              StartsWith("{\"file\":\"pve1/200/gpu3#2\",\"class\":\"ptx_version_unsupported\","
                         "\"root_cause_line\":4,"));
  EXPECT_EQ(env_.service().explain_requests()[0].attempt_number(), 2);
}

TEST_F(ServerExplainTest, ConfidenceIsShownFromTheStoredDiagnosis) {
  // Without --confidence the object is exactly the contract's; with it, `confidence` comes last.
  const auto plain = env_.Run(Explain, {"--server", "pve1/200/gpu3", "-o", "json"});
  EXPECT_THAT(plain.out, Not(HasSubstr("confidence")));
  const auto high = env_.Run(Explain, {"--server", "pve1/200/gpu3", "-o", "json", "--confidence"});
  EXPECT_EQ(high.code, 0) << high.err;
  EXPECT_THAT(high.out, HasSubstr("\"toolchain_fix\":true,\"confidence\":\"high\"}\n"));
  v1::ExplainResponse response;
  response.mutable_attempt()->set_server("pve1/200/gpu3");
  response.mutable_attempt()->set_number(2);
  response.mutable_diagnosis()->set_diagnosis_class("ninja_not_found");
  response.mutable_diagnosis()->set_confidence("low");
  env_.service().SetExplain(response);
  const auto low = env_.Run(Explain, {"--server", "pve1/200/gpu3", "-o", "json", "--confidence"});
  EXPECT_THAT(low.out, HasSubstr("\"toolchain_fix\":false,\"confidence\":\"low\"}\n"));
  const auto text = env_.Run(Explain, {"--server", "pve1/200/gpu3"});
  EXPECT_THAT(text.out, HasSubstr("  confidence: low (inferred"));
}

TEST_F(ServerExplainTest, ColourFollowsTheTerminalAndNoColor) {
  const auto tty = env_.Run(Explain, {"--server", "pve1/200/gpu3"}, {.tty = true});
  EXPECT_EQ(tty.out, FileExplain({}, /*tty=*/true));
  EXPECT_THAT(tty.out, HasSubstr("\x1b["));
  const auto no_color =
      env_.Run(Explain, {"--server", "pve1/200/gpu3"}, {.tty = true, .no_color = true});
  EXPECT_THAT(no_color.out, ::testing::Not(HasSubstr("\x1b[")));
}

TEST_F(ServerExplainTest, ErrorsAreClear) {
  auto both = env_.Run(Explain, {"--server", "pve1/200/gpu3", log_path_});
  EXPECT_EQ(both.code, 1);
  EXPECT_THAT(both.err, HasSubstr("not both"));
  auto bad = env_.Run(Explain, {"--server", "pve1/gpu3"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, StartsWith("fleetctl explain: server name 'pve1/gpu3': not three parts"));
  EXPECT_EQ(env_.Run(Explain, {"--attempt", "2", log_path_}).code, 1);

  v1::ExplainResponse running;
  running.mutable_attempt()->set_number(3);
  running.mutable_attempt()->set_outcome("running");
  env_.service().SetExplain(running);
  auto none = env_.Run(Explain, {"--server", "pve1/200/gpu3"});
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err,
            "fleetctl explain: pve1/200/gpu3#3 has no stored diagnosis (attempt "
            "running)\n");

  env_.service().SetError(absl::NotFoundError("pve1/200/gpu3 has no attempt 9"));
  auto missing = env_.Run(Explain, {"--server", "pve1/200/gpu3", "--attempt", "9"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "fleetctl explain: pve1/200/gpu3 has no attempt 9\n");
}

}  // namespace
}  // namespace fleet::cli

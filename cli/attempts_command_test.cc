#include "cli/attempts_command.h"

#include <csignal>

#include "cli/status_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::FakeFleetEnv;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class AttemptsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Time now = env_.clock().Now();
    v1::ListAttemptsResponse response;
    v1::Attempt* failed = response.add_attempts();
    failed->set_id("a-1");
    failed->set_server("pve1/200/gpu3");
    failed->set_number(1);
    ToProtoTime(now - absl::Minutes(10), failed->mutable_started_at());
    ToProtoTime(now - absl::Minutes(10) + absl::Seconds(192), failed->mutable_ended_at());
    failed->set_outcome("failed");
    failed->mutable_exit()->set_signal(SIGKILL);
    failed->set_diagnosis_class("ptx_version_unsupported");
    failed->set_summary("ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2");
    failed->set_trigger("initial");
    v1::Attempt* running = response.add_attempts();
    running->set_id("a-2");
    running->set_server("pve1/200/gpu3");
    running->set_number(2);
    ToProtoTime(now - absl::Seconds(42), running->mutable_started_at());
    running->set_outcome("running");
    running->set_trigger("remediation:7");
    env_.service().SetAttempts(response);
  }

  FakeFleetEnv env_;
};

TEST_F(AttemptsCommandTest, TableHasTheHistory) {
  const auto o = env_.Run(RunAttempts, {"pve1/200/gpu3"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "SERVER         #  OUTCOME  CLASS                    STARTED              DURATION  "
            "EXIT     TRIGGER        SUMMARY\n"
            "pve1/200/gpu3  1  failed   ptx_version_unsupported  2027-01-15 07:50:00  3m12s     "
            "SIGKILL  initial        ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2\n"
            "pve1/200/gpu3  2  running  -                        2027-01-15 07:59:18  42s       "
            "-        remediation:7  -\n");
  ASSERT_EQ(env_.service().attempts_requests().size(), 1u);
  EXPECT_EQ(env_.service().attempts_requests()[0].server(), "pve1/200/gpu3");
}

TEST_F(AttemptsCommandTest, ALowConfidenceClassIsMarkedInTheTable) {
  v1::ListAttemptsResponse response;
  v1::Attempt* failed = response.add_attempts();
  failed->set_server("pve1/200/gpu3");
  failed->set_number(1);
  failed->set_outcome("failed");
  failed->set_diagnosis_class("ninja_not_found");
  failed->set_diagnosis_confidence("low");
  env_.service().SetAttempts(response);
  const auto o = env_.Run(RunAttempts, {"pve1/200/gpu3"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("  ninja_not_found (low)  "));
}

TEST_F(AttemptsCommandTest, JsonHasEveryFieldWithStableTypes) {
  const auto o = env_.Run(RunAttempts, {"-o", "json"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out,
            "{\"attempts\":["
            "{\"id\":\"a-1\",\"server\":\"pve1/200/gpu3\",\"number\":1,\"outcome\":\"failed\","
            "\"diagnosis_class\":\"ptx_version_unsupported\",\"summary\":\"ptxas accepts PTX ISA "
            "up to 9.0 but was given PTX 9.2\",\"trigger\":\"initial\",\"started_at\":"
            "\"2027-01-15T07:50:00Z\",\"ended_at\":\"2027-01-15T07:53:12Z\",\"duration_ms\":"
            "192000,\"time_to_ready_ms\":null,\"exit\":{\"exited\":false,\"exit_code\":0,"
            "\"signal\":9,\"status_unknown\":false,\"at\":null}},"
            "{\"id\":\"a-2\",\"server\":\"pve1/200/gpu3\",\"number\":2,\"outcome\":\"running\","
            "\"diagnosis_class\":\"\",\"summary\":\"\",\"trigger\":\"remediation:7\","
            "\"started_at\":\"2027-01-15T07:59:18Z\",\"ended_at\":null,\"duration_ms\":null,"
            "\"time_to_ready_ms\":null,\"exit\":null}]}\n");
  EXPECT_EQ(env_.service().attempts_requests()[0].server(), "");
}

TEST_F(AttemptsCommandTest, AnEmptyExitIsNoExit) {
  // fleetd always sets `exit`; for an attempt that has not ended it is empty.
  v1::ListAttemptsResponse response;
  v1::Attempt* running = response.add_attempts();
  running->set_server("pve1/200/gpu3");
  running->set_number(1);
  running->set_outcome("running");
  running->mutable_exit();
  env_.service().SetAttempts(response);
  const auto o = env_.Run(RunAttempts, {"-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("\"exit\":null}"));
  EXPECT_EQ(FormatExit(*running), "-");
  // A clean exit (status 0) is an exit.
  running->mutable_exit()->set_exited(true);
  env_.service().SetAttempts(response);
  EXPECT_THAT(env_.Run(RunAttempts, {"-o", "json"}).out,
              HasSubstr("\"exit\":{\"exited\":true,\"exit_code\":0,"));
}

TEST_F(AttemptsCommandTest, ExitColumnForms) {
  v1::Attempt a;
  EXPECT_EQ(FormatExit(a), "-");
  a.mutable_exit()->set_exited(true);
  a.mutable_exit()->set_exit_code(1);
  EXPECT_EQ(FormatExit(a), "1");
  a.mutable_exit()->set_status_unknown(true);
  EXPECT_EQ(FormatExit(a), "unknown");
}

TEST_F(AttemptsCommandTest, ValidatesAndRejectsExtraArguments) {
  auto bad = env_.Run(RunAttempts, {"pve1"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, StartsWith("fleetctl attempts: server name 'pve1': not three parts"));
  EXPECT_EQ(env_.Run(RunAttempts, {"a/1/gpu0", "a/1/gpu1"}).code, 1);
  EXPECT_EQ(env_.Run(RunAttempts, {"-o", "wide"}).code, 1);
  EXPECT_TRUE(env_.service().attempts_requests().empty());
}

TEST_F(AttemptsCommandTest, NoAttemptsSaysSo) {
  env_.service().SetAttempts({});
  const auto o = env_.Run(RunAttempts, {"pve1/200/gpu3"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "");
  EXPECT_THAT(o.err, HasSubstr("no attempts recorded for pve1/200/gpu3"));
}

}  // namespace
}  // namespace fleet::cli

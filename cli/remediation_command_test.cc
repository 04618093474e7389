#include "cli/remediation_command.h"

#include "cli/status_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using ::fleet::cli::testing::AppliedPlan;
using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::MakePlan;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class RemediationCommandTest : public ::testing::Test {
 protected:
  absl::Time now() { return env_.clock().Now(); }

  // The plan after a failed apply: the first action failed with its output, the rest did not
  // run, and fleetd rolled the pip install back.
  v1::Plan RolledBackPlan() {
    v1::Plan plan = MakePlan(now());
    plan.set_status("rolled_back");
    plan.set_outcome_reason(
        "made things worse: after it the probe shows libnvrtc_not_loadable, which it did not show "
        "before; rolled back to the package set saved before it");
    ToProtoTime(now(), plan.mutable_applied_at());
    v1::ActionResult* first = plan.add_results();
    *first->mutable_action() = plan.actions(0).action();
    first->set_ok(true);
    first->set_message("installed nvidia-cuda-nvcc 13.2.78");
    v1::ActionResult* undo = plan.add_results();
    undo->mutable_action()->mutable_pip_uninstall()->add_packages("nvidia-cuda-nvcc");
    undo->set_ok(true);
    undo->set_message("uninstalled");
    return plan;
  }

  FakeFleetEnv env_;
};

// --- plan ---

TEST_F(RemediationCommandTest, PlanShowsTheProposedPlanAndHowToApplyIt) {
  v1::PlanResponse response;
  *response.mutable_plan() = MakePlan(now());
  env_.service().SetPlan(response);
  const auto o = env_.Run(RunPlan, {"pve1/200/gpu3"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_THAT(o.out, StartsWith("plan 7: proposed, trigger manual, server pve1/200/gpu3, "
                                "container pve1/200, class ptx_version_unsupported\n"));
  EXPECT_THAT(o.out, HasSubstr("  1. pip_install nvidia-cuda-nvcc==13.2.78\n"
                               "     ptxas of CUDA 13.2 accepts PTX ISA 9.2\n"));
  EXPECT_THAT(o.out, EndsWith("run: fleetctl apply 7\n"));
  const auto requests = env_.service().plan_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].server(), "pve1/200/gpu3");
  // Planning probes the container: the call may take longer than the default 10s.
  EXPECT_GT(env_.service().plan_time_left(), absl::Seconds(50));
  EXPECT_LE(env_.service().plan_time_left(), kPlanTimeout + absl::Seconds(1));  // gRPC rounds up
}

TEST_F(RemediationCommandTest, PlanReportOnlySaysWhyAndOffersNoApply) {
  v1::PlanResponse response;
  v1::Plan* plan = response.mutable_plan();
  plan->set_server("pve1/200/gpu3");
  plan->set_container("pve1/200");
  plan->set_status("report");
  plan->set_report_only("no toolchain problem: the probe finds everything in place");
  env_.service().SetPlan(response);
  const auto o = env_.Run(RunPlan, {"pve1/200/gpu3"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "plan: report, server pve1/200/gpu3, container pve1/200, class -\n"
            "nothing would be changed: no toolchain problem: the probe finds everything in "
            "place\n");
}

TEST_F(RemediationCommandTest, PlanJsonIsOneRemediationObject) {
  v1::PlanResponse response;
  *response.mutable_plan() = MakePlan(now());
  env_.service().SetPlan(response);
  const auto o = env_.Run(RunPlan, {"pve1/200/gpu3", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, StartsWith("{\"id\":\"7\",\"container\":\"pve1/200\",\"server\":"
                                "\"pve1/200/gpu3\",\"trigger\":\"manual\","));
  EXPECT_THAT(o.out, HasSubstr("\"status\":\"proposed\""));
  EXPECT_THAT(o.out, HasSubstr("\"ok\":null"));
  EXPECT_THAT(o.out, EndsWith("\"outcome_reason\":\"\",\"test_compile_ms\":null,"
                              "\"test_compile_class\":\"\",\"test_compile_after_ms\":null}\n"));
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1);
}

TEST_F(RemediationCommandTest, PlanArgumentsAreChecked) {
  EXPECT_THAT(env_.Run(RunPlan, {}).err, HasSubstr("fleetctl plan: give one SERVER"));
  EXPECT_EQ(env_.Run(RunPlan, {"a/1/gpu0", "a/1/gpu1"}).code, 1);
  const auto bad = env_.Run(RunPlan, {"pve1/200"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, StartsWith("fleetctl plan: server name 'pve1/200': not three parts"));
  const auto output = env_.Run(RunPlan, {"a/1/gpu0", "-o", "wide"});
  EXPECT_EQ(output.code, 1);
  EXPECT_EQ(output.err, "fleetctl plan: flag -o/--output: 'wide' is not one of text, json\n");
  EXPECT_EQ(env_.Run(RunPlan, {"a/1/gpu0", "--all"}).code, 1);
  EXPECT_TRUE(env_.service().plan_requests().empty());
  const auto help = env_.Run(RunPlan, {"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, StartsWith("usage: fleetctl plan SERVER"));
}

TEST_F(RemediationCommandTest, PlanForAnUnknownServerIsFleetdsAnswer) {
  env_.service().SetError(absl::NotFoundError("no server pve1/200/gpu9"));
  const auto o = env_.Run(RunPlan, {"pve1/200/gpu9"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "fleetctl plan: no server pve1/200/gpu9\n");
}

// --- apply ---

TEST_F(RemediationCommandTest, ApplyPrintsEachResultAndExitsZeroWhenApplied) {
  v1::ApplyPlanResponse response;
  *response.mutable_plan() = AppliedPlan(MakePlan(now()), now());
  *response.mutable_results() = response.plan().results();
  env_.service().SetApplyPlan(response);
  const auto o = env_.Run(RunApply, {"7"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_THAT(o.out, StartsWith("#  RESULT  TOOK   ACTION"));
  EXPECT_THAT(o.out, HasSubstr("\n1  ok      12.3s  pip_install nvidia-cuda-nvcc==13.2.78"));
  EXPECT_THAT(o.out, HasSubstr("\n3  ok      40ms   symlink /opt/venv/cu13/lib64 -> lib"));
  EXPECT_THAT(o.out, EndsWith("\nplan 7 applied\n"));
  const auto requests = env_.service().apply_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].plan_id(), "7");
  // The default 10s call timeout would cut a pip install short: apply waits at least 15 min.
  EXPECT_GT(env_.service().apply_time_left(), absl::Minutes(14));
  EXPECT_LE(env_.service().apply_time_left(), kApplyTimeout + absl::Seconds(1));
  // A longer --timeout wins.
  EXPECT_EQ(env_.Run(RunApply, {"7"}, {.timeout = absl::Minutes(40)}).code, 0);
  EXPECT_GT(env_.service().apply_time_left(), absl::Minutes(39));
}

TEST_F(RemediationCommandTest, ApplyTakesTheResultsBesideThePlanToo) {
  v1::ApplyPlanResponse response;
  v1::Plan applied = AppliedPlan(MakePlan(now()), now());
  *response.mutable_results() = applied.results();
  applied.clear_results();
  *response.mutable_plan() = applied;
  env_.service().SetApplyPlan(response);
  const auto o = env_.Run(RunApply, {"7"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, Not(HasSubstr("not run")));
  EXPECT_THAT(o.out, HasSubstr("installed nvidia-cuda-nvcc 13.2.78"));
}

TEST_F(RemediationCommandTest, ApplyThatFailedExitsOneWithTheReason) {
  v1::ApplyPlanResponse response;
  v1::Plan plan = MakePlan(now());
  plan.set_status("failed");
  plan.set_outcome_reason("pip_install failed: no matching distribution");
  v1::ActionResult* r = plan.add_results();
  *r->mutable_action() = plan.actions(0).action();
  r->set_ok(false);
  r->set_message("no matching distribution");
  r->set_output_tail("ERROR: No matching distribution found for nvidia-cuda-nvcc==13.2.78\n");
  *response.mutable_plan() = plan;
  env_.service().SetApplyPlan(response);
  const auto o = env_.Run(RunApply, {"7"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "fleetctl apply: plan 7 failed: pip_install failed: no matching distribution\n");
  EXPECT_THAT(o.out, HasSubstr("\n1  failed   -     pip_install nvidia-cuda-nvcc==13.2.78"));
  EXPECT_THAT(o.out, HasSubstr("\n2  not run  -     prepend_path"));
  EXPECT_THAT(o.out, HasSubstr("  | ERROR: No matching distribution found for "
                               "nvidia-cuda-nvcc==13.2.78\n"));
  EXPECT_THAT(o.out, Not(HasSubstr("applied")));
}

TEST_F(RemediationCommandTest, ApplyRolledBackExitsOneAndShowsTheRollback) {
  v1::ApplyPlanResponse response;
  *response.mutable_plan() = RolledBackPlan();
  env_.service().SetApplyPlan(response);
  const auto o = env_.Run(RunApply, {"7"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl apply: plan 7 rolled_back: made things worse: "));
  EXPECT_THAT(o.out, HasSubstr("\nundo1  ok       -     pip_uninstall nvidia-cuda-nvcc"));

  const auto json = env_.Run(RunApply, {"7", "-o", "json"});
  EXPECT_EQ(json.code, 1);
  EXPECT_THAT(json.out, HasSubstr("\"status\":\"rolled_back\""));
  EXPECT_THAT(json.out, HasSubstr("\"rollback\":[{\"kind\":\"pip_uninstall\",\"description\":"
                                  "\"pip_uninstall nvidia-cuda-nvcc\",\"ok\":true,"
                                  "\"message\":\"uninstalled\","));
  EXPECT_THAT(json.err, StartsWith("fleetctl apply: plan 7 rolled_back: "));
}

TEST_F(RemediationCommandTest, ApplyOfAnUnknownPlanIsFleetdsNotFound) {
  env_.service().SetError(absl::NotFoundError("no plan 99"));
  const auto o = env_.Run(RunApply, {"99"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "fleetctl apply: no plan 99\n");
  env_.service().SetError(
      absl::FailedPreconditionError("plan 5 is applied: only a proposed plan is applied"));
  EXPECT_EQ(env_.Run(RunApply, {"5"}).err,
            "fleetctl apply: plan 5 is applied: only a proposed plan is applied\n");
}

TEST_F(RemediationCommandTest, ApplyArgumentsAreChecked) {
  EXPECT_THAT(env_.Run(RunApply, {}).err, HasSubstr("fleetctl apply: give one PLAN_ID"));
  EXPECT_EQ(env_.Run(RunApply, {"7", "8"}).code, 1);
  EXPECT_EQ(env_.Run(RunApply, {""}).code, 1);
  EXPECT_EQ(env_.Run(RunApply, {"7", "-o", "wide"}).code, 1);
  EXPECT_TRUE(env_.service().apply_requests().empty());
}

TEST_F(RemediationCommandTest, ApplyWithANoAnswerDaemonSaysFleetdIsUnreachable) {
  const auto o = env_.Run(RunApply, {"7"}, {.socket_path = env_.dir().Join("missing.sock")});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, StartsWith("fleetctl: cannot reach fleetd at unix:"));
}

// --- remediations ---

class RemediationsListTest : public RemediationCommandTest {
 protected:
  void SetUp() override {
    v1::ListRemediationsResponse response;
    v1::Plan preflight;
    preflight.set_id("5");
    preflight.set_container("pve1/200");
    preflight.set_server("pve1/200/gpu3");
    preflight.set_trigger("preflight");
    preflight.set_status("applied");
    preflight.set_summary("install ninja for the JIT build");
    v1::PlannedAction* a = preflight.add_actions();
    a->mutable_action()->mutable_pip_install()->add_requirements()->set_name("ninja");
    ToProtoTime(now() - absl::Minutes(30), preflight.mutable_created_at());
    v1::ActionResult* r = preflight.add_results();
    *r->mutable_action() = a->action();
    r->set_ok(true);
    // The probe before it had no nvcc to test-compile with; the one after it did, and failed.
    v1::TestCompile* after = preflight.mutable_after()->mutable_test_compile();
    after->set_ran(true);
    after->mutable_took()->set_seconds(1);
    after->mutable_took()->set_nanos(812000000);
    after->mutable_diagnosis()->set_diagnosis_class("ptx_version_unsupported");
    *response.add_plans() = preflight;
    *response.add_plans() = RolledBackPlan();
    *response.add_plans() = MakePlan(now());
    env_.service().SetRemediations(response);
  }
};

TEST_F(RemediationsListTest, TableHasOneRowPerRemediation) {
  const auto o = env_.Run(RunRemediations, {});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "ID  CONTAINER  TRIGGER    CLASS                    STATUS       ACTIONS  CREATED      "
            "        SUMMARY\n"
            "5   pve1/200   preflight  -                        applied      1        2027-01-15 "
            "07:30:00  install ninja for the JIT build\n"
            "7   pve1/200   manual     ptx_version_unsupported  rolled_back  3        2027-01-15 "
            "07:58:00  use the pip CUDA 13.2 nvcc so that ptxas accepts PTX ISA 9.2\n"
            "7   pve1/200   manual     ptx_version_unsupported  proposed     3        2027-01-15 "
            "07:58:00  use the pip CUDA 13.2 nvcc so that ptxas accepts PTX ISA 9.2\n");
  ASSERT_EQ(env_.service().remediations_requests().size(), 1u);
  EXPECT_EQ(env_.service().remediations_requests()[0].container(), "");
}

TEST_F(RemediationsListTest, WideListsTheActionsUnderEachRowAndTheReason) {
  const auto o = env_.Run(RunRemediations, {"pve1/200", "-o", "wide"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, StartsWith("ID  CONTAINER  SERVER         TRIGGER    CLASS"));
  // SUMMARY is as wide as its longest cell (60 characters) and two spaces.
  EXPECT_THAT(o.out, HasSubstr("  SUMMARY                                                       "
                               "TEST-COMPILE          REASON\n"));
  // What the probes' test-compiles took: none before it (no nvcc), 1.8 s after, failed.
  EXPECT_THAT(o.out, HasSubstr("install ninja for the JIT build                               "
                               "-, after 1.8s failed  -\n"
                               "    1. pip_install ninja  [ok]\n"
                               "7   pve1/200   pve1/200/gpu3  manual"));
  EXPECT_THAT(o.out, HasSubstr("made things worse: after it the probe shows "
                               "libnvrtc_not_loadable"));
  EXPECT_THAT(o.out, HasSubstr("    1. pip_install nvidia-cuda-nvcc==13.2.78  [ok]\n"
                               "    2. prepend_path PATH /opt/venv/cu13/bin\n"
                               "    3. symlink /opt/venv/cu13/lib64 -> lib\n"
                               "    undo1. pip_uninstall nvidia-cuda-nvcc  [ok]\n"));
  EXPECT_EQ(env_.service().remediations_requests()[0].container(), "pve1/200");
}

TEST_F(RemediationsListTest, JsonHasEveryRemediation) {
  const auto o = env_.Run(RunRemediations, {"pve1/200/gpu3", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, StartsWith("{\"remediations\":[{\"id\":\"5\",\"container\":\"pve1/200\","));
  EXPECT_THAT(o.out, HasSubstr("{\"kind\":\"pip_install\",\"description\":\"pip_install "
                               "ninja\",\"reason\":\"\",\"ok\":true,\"message\":\"\","
                               "\"output_tail\":\"\",\"took_ms\":null}"));
  EXPECT_THAT(o.out, EndsWith("}]}\n"));
  EXPECT_EQ(env_.service().remediations_requests()[0].container(), "pve1/200/gpu3");
}

TEST_F(RemediationsListTest, NoneRecordedSaysSo) {
  env_.service().SetRemediations({});
  const auto o = env_.Run(RunRemediations, {"local/sim"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "fleetctl remediations: no remediations recorded for local/sim\n");
  EXPECT_EQ(env_.Run(RunRemediations, {"-o", "json"}).out, "{\"remediations\":[]}\n");
}

TEST_F(RemediationsListTest, NamesAreCheckedAndFleetdsRefusalShown) {
  const auto one = env_.Run(RunRemediations, {"pve1"});
  EXPECT_EQ(one.code, 1);
  EXPECT_THAT(
      one.err,
      StartsWith("fleetctl remediations: server or container name 'pve1': not two or three parts"));
  const auto container = env_.Run(RunRemediations, {"pve1/2;0"});
  EXPECT_EQ(container.code, 1);
  EXPECT_THAT(
      container.err,
      StartsWith("fleetctl remediations: container name 'pve1/2;0': invalid container id '2;0'"));
  EXPECT_THAT(env_.Run(RunRemediations, {"pve1/200/gpuX"}).err,
              StartsWith("fleetctl remediations: server name 'pve1/200/gpuX': the GPU index must "
                         "be a decimal number"));
  EXPECT_EQ(env_.Run(RunRemediations, {"pve1/200", "pve1/201"}).code, 1);
  EXPECT_EQ(env_.Run(RunRemediations, {"-o", "name"}).code, 1);
  EXPECT_TRUE(env_.service().remediations_requests().empty());
  env_.service().SetError(absl::NotFoundError("no server or container pve9/200"));
  const auto unknown = env_.Run(RunRemediations, {"pve9/200"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "fleetctl remediations: no server or container pve9/200\n");
}

}  // namespace
}  // namespace fleet::cli

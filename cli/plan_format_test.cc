#include "cli/plan_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_test_data.h"
#include "tests/testing/fake_fleet_service.h"

namespace fleet::cli {
namespace {

using fleet::cli::testing::kNow;

using ::fleet::cli::testing::AppliedPlan;
using ::fleet::cli::testing::MakePlan;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(DescribeAction, OneLinePerKind) {
  v1::Action a;
  EXPECT_EQ(DescribeAction(a), "(no action)");
  EXPECT_EQ(ActionKindName(a), "none");

  a.mutable_set_env()->set_name("CUDA_HOME");
  a.mutable_set_env()->set_value("/opt/cuda");
  EXPECT_EQ(DescribeAction(a), "set_env CUDA_HOME=/opt/cuda");
  EXPECT_EQ(ActionKindName(a), "set_env");

  a.mutable_prepend_path()->set_variable("LD_LIBRARY_PATH");
  a.mutable_prepend_path()->set_directory("/x/lib");
  EXPECT_EQ(DescribeAction(a), "prepend_path LD_LIBRARY_PATH /x/lib");

  v1::Requirement* r = a.mutable_pip_install()->add_requirements();
  r->set_name("nvidia-cuda-nvcc");
  r->set_version("13.2.78");
  a.mutable_pip_install()->add_requirements()->set_name("ninja");
  EXPECT_EQ(DescribeAction(a), "pip_install nvidia-cuda-nvcc==13.2.78 ninja");
  EXPECT_EQ(ActionKindName(a), "pip_install");

  a.mutable_pip_uninstall()->add_packages("nvidia-cuda-nvcc");
  EXPECT_EQ(DescribeAction(a), "pip_uninstall nvidia-cuda-nvcc");

  a.mutable_apt_install()->add_packages("ninja-build");
  a.mutable_apt_install()->add_packages("cuda-nvcc-13-2");
  EXPECT_EQ(DescribeAction(a), "apt_install ninja-build cuda-nvcc-13-2");

  a.mutable_add_server_args()->add_args("--disable-cuda-graph");
  EXPECT_EQ(DescribeAction(a), "add_server_args --disable-cuda-graph");
  a.mutable_remove_server_args()->add_args("--enable-torch-compile");
  EXPECT_EQ(DescribeAction(a), "remove_server_args --enable-torch-compile");
  EXPECT_EQ(ActionKindName(a), "remove_server_args");

  a.mutable_clear_jit_cache()->set_directory("/root/.cache/flashinfer");
  EXPECT_EQ(DescribeAction(a), "clear_jit_cache /root/.cache/flashinfer");

  a.mutable_symlink()->set_link("/v/cu13/lib64");
  a.mutable_symlink()->set_target("lib");
  EXPECT_EQ(DescribeAction(a), "symlink /v/cu13/lib64 -> lib");
  EXPECT_EQ(ActionKindName(a), "symlink");
}

TEST(DescribeAction, QuotesValuesAShellWouldSplit) {
  v1::Action a;
  a.mutable_set_env()->set_name("NVCC_APPEND_FLAGS");
  a.mutable_set_env()->set_value("-Xptxas -O2");
  EXPECT_EQ(DescribeAction(a), "set_env NVCC_APPEND_FLAGS='-Xptxas -O2'");
  a.mutable_set_env()->set_value("");
  EXPECT_EQ(DescribeAction(a), "set_env NVCC_APPEND_FLAGS=''");
  a.mutable_add_server_args()->add_args("--json-model-override-args");
  a.mutable_add_server_args()->add_args("{\"a\": 'b'}");
  EXPECT_EQ(DescribeAction(a), "add_server_args --json-model-override-args '{\"a\": '\\''b'\\''}'");
}

TEST(MatchResults, LeadingResultsAreTheActionsTheRestTheRollback) {
  v1::Plan plan = MakePlan(kNow);
  MatchedResults none = MatchResults(plan);
  EXPECT_THAT(none.per_action, ElementsAre(nullptr, nullptr, nullptr));
  EXPECT_THAT(none.rollback, IsEmpty());

  // The first action ran and failed; then a rollback (pip_uninstall) ran.
  v1::ActionResult* failed = plan.add_results();
  *failed->mutable_action() = plan.actions(0).action();
  failed->set_ok(false);
  v1::ActionResult* undo = plan.add_results();
  undo->mutable_action()->mutable_pip_uninstall()->add_packages("nvidia-cuda-nvcc");
  undo->set_ok(true);
  MatchedResults m = MatchResults(plan);
  EXPECT_THAT(m.per_action, ElementsAre(&plan.results(0), nullptr, nullptr));
  EXPECT_THAT(m.rollback, ElementsAre(&plan.results(1)));

  // A rollback action equal to a later planned one is still the rollback: matching stops at
  // the first result that is not the next planned action.
  v1::ActionResult* again = plan.add_results();
  *again->mutable_action() = plan.actions(1).action();
  EXPECT_THAT(MatchResults(plan).rollback, ElementsAre(&plan.results(1), &plan.results(2)));
}

TEST(FormatTook, MillisecondsAndUnset) {
  google::protobuf::Duration d;
  EXPECT_EQ(FormatTook(d), "-");
  d.set_nanos(40123456);
  EXPECT_EQ(FormatTook(d), "40ms");
  d.set_seconds(12);
  d.set_nanos(300000000);
  EXPECT_EQ(FormatTook(d), "12.3s");
  d.set_seconds(123);
  d.set_nanos(500000000);
  EXPECT_EQ(FormatTook(d), "2m3.5s");
}

TEST(FormatPlan, ProposedPlanHasEverythingAndTheApplyCommand) {
  EXPECT_EQ(FormatPlan(MakePlan(kNow)),
            "plan 7: proposed, trigger manual, server pve1/200/gpu3, container pve1/200, class "
            "ptx_version_unsupported\n"
            "summary: use the pip CUDA 13.2 nvcc so that ptxas accepts PTX ISA 9.2\n"
            "CUDA 13.2; affects the JIT build; saves the package set for a rollback\n"
            "env: CUDA_HOME=/opt/venv/cu13\n"
            "actions:\n"
            "  1. pip_install nvidia-cuda-nvcc==13.2.78\n"
            "     ptxas of CUDA 13.2 accepts PTX ISA 9.2\n"
            "  2. prepend_path PATH /opt/venv/cu13/bin\n"
            "     the pip nvcc first on PATH\n"
            "  3. symlink /opt/venv/cu13/lib64 -> lib\n"
            "     flashinfer links against CUDA_HOME/lib64\n"
            "constraints:\n"
            "  - nvcc 13.0.88 accepts PTX ISA up to 9.0; flashinfer emits 9.2\n"
            "unresolved:\n"
            "  - ninja_not_found: the venv has no ninja and apt_install is not allowed\n"
            "run: fleetctl apply 7\n");
}

TEST(FormatPlan, AReportSaysWhyNothingWouldChangeAndHasNoApply) {
  v1::Plan report;
  report.set_container("pve1/200");
  report.set_server("pve1/200/gpu3");
  report.set_status("report");
  report.set_report_only("the policy forbids pip_install and the fix needs it");
  report.add_constraints("pip_install not allowed by policy");
  EXPECT_EQ(FormatPlan(report),
            "plan: report, server pve1/200/gpu3, container pve1/200, class -\n"
            "nothing would be changed: the policy forbids pip_install and the fix needs it\n"
            "constraints:\n"
            "  - pip_install not allowed by policy\n");
}

TEST(FormatApplyResults, EveryActionItsResultAndTheFailedOutput) {
  v1::Plan plan = AppliedPlan(MakePlan(kNow), kNow);
  EXPECT_EQ(FormatApplyResults(plan, /*color=*/false),
            "#  RESULT  TOOK   ACTION                                 MESSAGE\n"
            "1  ok      12.3s  pip_install nvidia-cuda-nvcc==13.2.78  installed "
            "nvidia-cuda-nvcc 13.2.78\n"
            "2  ok      40ms   prepend_path PATH /opt/venv/cu13/bin   done\n"
            "3  ok      40ms   symlink /opt/venv/cu13/lib64 -> lib    done\n");
  // The second action failed: the third did not run; its output tail follows the table.
  plan.mutable_results()->DeleteSubrange(2, 1);
  v1::ActionResult* r = plan.mutable_results(1);
  r->set_ok(false);
  r->set_message("not a directory");
  r->set_output_tail("line one\nline two\n");
  v1::ActionResult* undo = plan.add_results();
  undo->mutable_action()->mutable_pip_uninstall()->add_packages("nvidia-cuda-nvcc");
  undo->set_ok(true);
  const std::string out = FormatApplyResults(plan, /*color=*/false);
  EXPECT_THAT(
      out,
      HasSubstr(
          "\n2      failed   40ms   prepend_path PATH /opt/venv/cu13/bin   not a directory\n"));
  EXPECT_THAT(out, HasSubstr("\n3      not run  -      symlink"));
  EXPECT_THAT(out, HasSubstr("\nundo1  ok       -      pip_uninstall nvidia-cuda-nvcc"));
  EXPECT_THAT(out, HasSubstr("output of 2 (prepend_path PATH /opt/venv/cu13/bin), last lines:\n"
                             "  | line one\n"
                             "  | line two\n"));
  EXPECT_THAT(out, Not(HasSubstr("\x1b[")));
  EXPECT_THAT(FormatApplyResults(plan, /*color=*/true), HasSubstr("\x1b["));
}

TEST(RemediationJson, KeysInOrderAndResultsMatched) {
  v1::Plan plan = AppliedPlan(MakePlan(kNow), kNow);
  const std::string text = JsonText(RemediationJson(plan));
  EXPECT_EQ(text,
            "{\"id\":\"7\",\"container\":\"pve1/200\",\"server\":\"pve1/200/gpu3\",\"trigger\":"
            "\"manual\",\"diagnosis_class\":\"ptx_version_unsupported\",\"status\":\"applied\","
            "\"summary\":\"use the pip CUDA 13.2 nvcc so that ptxas accepts PTX ISA 9.2\","
            "\"report_only\":\"\",\"causes\":[\"ptx_version_unsupported\"],\"actions\":["
            "{\"kind\":\"pip_install\",\"description\":\"pip_install nvidia-cuda-nvcc==13.2.78\","
            "\"reason\":\"ptxas of CUDA 13.2 accepts PTX ISA 9.2\",\"ok\":true,\"message\":"
            "\"installed nvidia-cuda-nvcc 13.2.78\",\"output_tail\":\"\",\"took_ms\":12300},"
            "{\"kind\":\"prepend_path\",\"description\":\"prepend_path PATH /opt/venv/cu13/bin\","
            "\"reason\":\"the pip nvcc first on PATH\",\"ok\":true,\"message\":\"done\","
            "\"output_tail\":\"\",\"took_ms\":40},"
            "{\"kind\":\"symlink\",\"description\":\"symlink /opt/venv/cu13/lib64 -> lib\","
            "\"reason\":\"flashinfer links against CUDA_HOME/lib64\",\"ok\":true,\"message\":"
            "\"done\",\"output_tail\":\"\",\"took_ms\":40}],"
            "\"rollback\":[],"
            "\"constraints\":[\"nvcc 13.0.88 accepts PTX ISA up to 9.0; flashinfer emits 9.2\"],"
            "\"unresolved\":[\"ninja_not_found: the venv has no ninja and apt_install is not "
            "allowed\"],\"cuda_release\":\"13.2\",\"affects_jit_build\":true,\"degraded\":false,"
            "\"save_package_set\":true,\"env_changes\":{\"CUDA_HOME\":\"/opt/venv/cu13\"},"
            "\"fingerprint\":\"3f2a9c\",\"attempt_id\":\"pve1/200/gpu3#1-5c2e91ab\","
            "\"trigger_facts\":{\"ptx_wanted\":[\"9.2\"]},\"created_at\":\"2027-01-15T07:58:00Z\","
            "\"applied_at\":\"2027-01-15T08:00:00Z\",\"outcome_reason\":\"\",\"test_compile_ms\":"
            "null,\"test_compile_class\":\"\",\"test_compile_after_ms\":null}");
}

TEST(RemediationJson, ActionsNotRunHaveNullResults) {
  v1::Plan plan = MakePlan(kNow);
  plan.clear_created_at();
  const std::string text = JsonText(RemediationJson(plan));
  EXPECT_THAT(text, HasSubstr("\"reason\":\"the pip nvcc first on PATH\",\"ok\":null,"
                              "\"message\":\"\",\"output_tail\":\"\",\"took_ms\":null}"));
  EXPECT_THAT(text, HasSubstr("\"created_at\":null,\"applied_at\":null,"));
}

// A plan that sets a secret: the value never reaches the text, the results or the JSON.
v1::Plan PlanWithASecret() {
  v1::Plan plan = MakePlan(kNow);
  v1::PlannedAction* set = plan.add_actions();
  set->mutable_action()->mutable_set_env()->set_name("HF_TOKEN");
  set->mutable_action()->mutable_set_env()->set_value("hf_supersecret123");
  set->set_reason("the model is gated");
  (*plan.mutable_env_changes())["HF_TOKEN"] = "hf_supersecret123";
  plan.set_summary("set HF_TOKEN=hf_supersecret123 for the gated model");
  const v1::Action action = set->action();  // `set` points into the plan replaced below
  plan = AppliedPlan(plan, kNow);
  v1::ActionResult* r = plan.add_results();
  *r->mutable_action() = action;
  r->set_ok(true);
  r->set_message("HF_TOKEN=hf_supersecret123 recorded");
  return plan;
}

TEST(Redaction, ASecretEnvValueIsShownRedactedInEveryPlanOutput) {
  const v1::Plan plan = PlanWithASecret();
  EXPECT_EQ(DescribeAction(plan.actions(plan.actions_size() - 1).action()),
            "set_env HF_TOKEN=<redacted>");
  const std::string report = FormatPlan(plan);
  EXPECT_THAT(report, Not(HasSubstr("hf_supersecret123")));
  EXPECT_THAT(report, HasSubstr("HF_TOKEN=<redacted>"));
  const std::string applied = FormatApplyResults(plan, /*color=*/false);
  EXPECT_THAT(applied, Not(HasSubstr("hf_supersecret123")));
  EXPECT_THAT(applied, HasSubstr("HF_TOKEN=<redacted>"));
  const std::string text = JsonText(RemediationJson(plan));
  EXPECT_THAT(text, Not(HasSubstr("hf_supersecret123")));
  EXPECT_THAT(text, HasSubstr("\"HF_TOKEN\":\"<redacted>\""));
  // Other values are shown as they are.
  EXPECT_THAT(text, HasSubstr("\"CUDA_HOME\":\"/opt/venv/cu13\""));
}

}  // namespace
}  // namespace fleet::cli

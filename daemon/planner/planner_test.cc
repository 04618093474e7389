#include "daemon/planner/planner.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/planner_testing.h"

namespace fleet::daemon {
namespace {

using namespace fleet::daemon::plannertest;  // the container and its snapshots

using fleet::v1::Diagnosis;
using fleet::v1::Policy;
using fleet::v1::ServerSpec;
using fleet::v1::ToolchainSnapshot;
using ::testing::_;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

PlannerInput Input(ToolchainSnapshot snapshot, ServerSpec spec, Policy policy = AutoPolicy()) {
  return {std::move(snapshot), std::move(spec), std::move(policy), {}};
}

RemediationPlanner Planner() {
  PlannerOptions options;
  options.driver_libcuda = kLibcuda;
  return RemediationPlanner(&CudaReleaseTable::Builtin(), options);
}

std::vector<std::string> Described(const RemediationPlan& plan) {
  std::vector<std::string> out;
  for (const PlannedAction& p : plan.actions) out.push_back(DescribeAction(p.action));
  return out;
}

// The pip packages after the plan's installs: the versions pip would leave.
std::map<std::string, std::string> PackagesAfter(const ToolchainSnapshot& s,
                                                 const RemediationPlan& plan) {
  std::map<std::string, std::string> packages;
  for (const fleet::v1::Package& p : s.pip_packages()) packages[p.name()] = p.version();
  for (const PlannedAction& a : plan.actions) {
    for (const fleet::v1::Requirement& r : a.action.pip_install().requirements()) {
      packages[r.name()] = r.version();
    }
  }
  return packages;
}

// The CUDA toolkit pieces' major.minor after the plan, by package.
std::map<std::string, std::string> PiecesAfter(const ToolchainSnapshot& s,
                                               const RemediationPlan& plan) {
  std::map<std::string, std::string> out;
  for (const auto& [name, version] : PackagesAfter(s, plan)) {
    if (CudaReleaseTable::Builtin().PieceOfPackage(name).empty()) continue;
    out[name] = ParseCudaVersion(version)->ToString();
  }
  return out;
}

PastRemediation Past(const std::string& id, const RemediationPlan& plan, RemediationOutcome outcome,
                     const Diagnosis* trigger = nullptr) {
  PastRemediation r;
  r.id = id;
  r.causes = plan.causes;
  r.fingerprint = plan.fingerprint;
  for (const PlannedAction& a : plan.actions) r.actions.push_back(a.action);
  r.outcome = outcome;
  if (trigger != nullptr) {
    r.trigger_class = trigger->diagnosis_class();
    r.trigger_facts.assign(trigger->facts().begin(), trigger->facts().end());
  }
  return r;
}

// --- The release table ------------------------------------------------------------------------

TEST(CudaReleaseTable, BuiltinKnowsThePtxIsaOfEachRelease) {
  const CudaReleaseTable& t = CudaReleaseTable::Builtin();
  const std::map<std::string, std::string> expected = {
      {"12.8", "8.7"}, {"12.9", "8.8"}, {"13.0", "9.0"}, {"13.1", "9.1"}, {"13.2", "9.2"}};
  for (const auto& [release, isa] : expected) {
    EXPECT_EQ(t.PtxIsaOf(*ParseCudaVersion(release))->ToString(), isa) << release;
  }
  EXPECT_EQ(t.MinReleaseForPtx({9, 2})->ToString(), "13.2");
  EXPECT_EQ(t.MinReleaseForPtx({9, 1})->ToString(), "13.1");
  EXPECT_FALSE(t.MinReleaseForPtx({9, 3}).has_value());
  EXPECT_EQ(t.MinReleaseForGpu({12, 0})->ToString(), "12.9");
  EXPECT_FALSE(t.MinReleaseForGpu({8, 6}).has_value());
  EXPECT_EQ(t.PieceOfPackage("nvidia-nvvm"), "nvvm");
  EXPECT_EQ(t.PieceOfPackage("torch"), "");
  EXPECT_EQ(t.ninja_apt(), "ninja-build");
  EXPECT_EQ(t.ninja_pip().name(), "ninja");
}

TEST(CudaReleaseTable, BuiltinSetsAreWholeAndOfTheirRelease) {
  int installable = 0;
  for (const CudaRelease& r : CudaReleaseTable::Builtin().releases()) {
    if (r.pip.empty()) continue;
    ++installable;
    EXPECT_EQ(r.pip.size(), std::size(kToolkitPieces)) << r.version.ToString();
    for (const auto& [piece, req] : r.pip) {
      EXPECT_EQ(ParseCudaVersion(req.version()), r.version) << req.name();
    }
  }
  EXPECT_EQ(installable, 3);  // 13.0, 13.1, 13.2: what tests/sim/pip-index.txt offers
}

TEST(CudaReleaseTable, RejectsMalformedDataNamingTheLine) {
  EXPECT_THAT(
      std::string(
          CudaReleaseTable::Parse("[release 13.0]\nptx_isa = x\n", "t.conf").status().message()),
      HasSubstr("t.conf:2:"));
  EXPECT_FALSE(CudaReleaseTable::Parse("[release 13.2]\nptx_isa = 9.2\n[release 13.0]\n", "t")
                   .ok());  // not ascending
  EXPECT_FALSE(CudaReleaseTable::Parse(
                   "[release 13.2]\nptx_isa = 9.2\nnvcc = nvidia-cuda-nvcc==13.1.80\n", "t")
                   .ok());  // a package of another release
  EXPECT_FALSE(CudaReleaseTable::Parse("[release 13.2]\nptx_isa = 9.2\nnvcc = n==13.2.1\n", "t")
                   .ok());  // a partial set
  EXPECT_FALSE(CudaReleaseTable::Parse("[gpus 12]\n", "t").ok());
}

// --- Preflight and the seed scenario ------------------------------------------------------------

TEST(Preflight, HealthyToolchainIsLeftAlone) {
  PlannerDecision d = Planner().Preflight(Input(FixedSnapshot(), FixedSpec()));
  ASSERT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  EXPECT_EQ(d.report->reason, "the probe shows nothing to fix");
}

TEST(Preflight, MissingGpuDeviceNodesAreSaidAndBlockNothing) {
  ToolchainSnapshot s = FixedSnapshot();
  s.set_device_nodes_checked(true);
  s.add_device_node_problems("/dev/nvidia0: missing");
  s.add_device_node_problems("/dev/nvidiactl: a regular file, not a character device");
  PlannerDecision d = Planner().Preflight(Input(s, FixedSpec()));
  // Nothing to change (no action reaches the container's config), nothing held back: a report.
  ASSERT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  EXPECT_THAT(d.problems, IsEmpty());
  EXPECT_THAT(d.constraints,
              Contains(AllOf(HasSubstr("GPU device nodes must be in the container"),
                             HasSubstr("/dev/nvidia0: missing; /dev/nvidiactl: a regular file"),
                             HasSubstr("docs/config.md"))));
  // A healthy container's constraints say nothing of them.
  for (const std::string& c :
       Planner().Preflight(Input(FixedSnapshot(), FixedSpec())).constraints) {
    EXPECT_THAT(c, Not(HasSubstr("device node")));
  }
}

TEST(Preflight, SeedStateIsOnePlanForEverythingTheProbeSees) {
  const ToolchainSnapshot seed = SeedSnapshot();
  PlannerDecision d = Planner().Preflight(Input(seed, SeedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_FALSE(d.report.has_value());
  const RemediationPlan& plan = *d.plan;
  // Compiler = headers (13.0): the PTX flashinfer will want is not visible yet, so nothing moves
  // that need not; the headers decide the compiler's release.
  EXPECT_THAT(Described(plan),
              ElementsAre("pip_install nvidia-cuda-nvcc==13.0.88", "apt_install ninja-build",
                          "set_env CUDA_HOME=" + Cuda(""), "prepend_path PATH " + Cuda("/bin"),
                          "prepend_path LD_LIBRARY_PATH " + Cuda("/lib"),
                          "symlink " + Cuda("/lib64") + " -> lib",
                          "symlink " + Cuda("/lib/libcudart.so") + " -> libcudart.so.13",
                          "symlink " + Cuda("/lib/stubs/libcuda.so") + " -> " + kLibcuda));
  EXPECT_THAT(plan.causes, UnorderedElementsAre("nvcc_not_found", "missing_shared_library",
                                                "ninja_not_found", "link_error"));
  EXPECT_EQ(plan.trigger, "preflight");
  EXPECT_EQ(plan.cuda_release, "13.0");
  EXPECT_TRUE(plan.affects_jit_build);
  EXPECT_FALSE(plan.degraded);
  EXPECT_TRUE(plan.save_package_set);
  EXPECT_THAT(plan.unresolved, IsEmpty());
  for (const PlannedAction& a : plan.actions) EXPECT_FALSE(a.reason.empty()) << a.reason;
  EXPECT_THAT(plan.env_changes,
              UnorderedElementsAre(Pair("CUDA_HOME", kCuda),
                                   Pair("PATH", Cuda("/bin") + ":/w/venv/bin:/w/bin"),
                                   Pair("LD_LIBRARY_PATH", Cuda("/lib"))));
  // Every piece of one release afterwards.
  EXPECT_THAT(PiecesAfter(seed, plan), Each(Pair(_, "13.0")));
  EXPECT_EQ(plan.fingerprint.size(), 16u);
}

// The state after the preflight plan: compiler and headers 13.0, everything on its path.
ToolchainSnapshot SeedAfterPreflight() {
  ToolchainSnapshot s = FixedSnapshot();
  std::map<std::string, std::string> set130 = kSet130;
  set130["nvidia-cuda-nvcc"] = "13.0.88";
  SetPackages(&s, set130);
  s.mutable_nvcc()->set_version("13.0");
  s.mutable_ptxas()->set_version("13.0");
  s.set_ptx_isa_max("9.0");
  s.set_cudart_header_version("13.0");
  s.set_nvvm_version("13.0");
  return s;
}

TEST(SeedScenario, PtxFailureAfterPreflightInstallsTheWhole132SetInOneRemediation) {
  RemediationPlanner planner = Planner();
  PlannerDecision pre = planner.Preflight(Input(SeedSnapshot(), SeedSpec()));
  ASSERT_TRUE(pre.plan.has_value());
  PlannerInput in = Input(SeedAfterPreflight(), ApplyToSpec(*pre.plan, SeedSpec()));
  in.history.push_back(Past("rem-1", *pre.plan, RemediationOutcome::kApplied));

  const Diagnosis ptx = PtxDiag();
  PlannerDecision d = planner.Plan(ptx, in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  // The preflight did not address PTX: it is not a failed fix.
  EXPECT_THAT(d.failed_remediations, IsEmpty());
  EXPECT_THAT(Described(*d.plan),
              ElementsAre("pip_install nvidia-cuda-nvcc==13.2.78 nvidia-cuda-crt==13.2.78 "
                          "nvidia-nvvm==13.2.78 nvidia-cuda-runtime==13.2.75 "
                          "nvidia-cuda-nvrtc==13.2.78 nvidia-cuda-cupti==13.2.75"));
  EXPECT_THAT(PiecesAfter(in.snapshot, *d.plan), Each(Pair(_, "13.2")));
  EXPECT_EQ(d.plan->causes.front(), "ptx_version_unsupported");
  EXPECT_EQ(d.plan->cuda_release, "13.2");
  EXPECT_TRUE(d.plan->affects_jit_build);
  EXPECT_THAT(d.plan->env_changes, IsEmpty());
  EXPECT_THAT(d.constraints, Contains(HasSubstr("ptxas must accept PTX 9.2")));
}

// --- The catch-22: both constraints, one remediation ------------------------------------------

TEST(CatchTwentyTwo, PtxFailureWithCompilerAndHeadersAt130MovesAllToOne132Set) {
  // Downgrading nothing and upgrading only nvcc would break the header check; the plan must move
  // nvcc, crt, nvvm, runtime, nvrtc and cupti together.
  PlannerDecision d = Planner().Plan(PtxDiag(), Input(SeedAfterPreflight(), FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  ASSERT_EQ(d.plan->actions.size(), 1u);
  EXPECT_EQ(d.plan->actions[0].action.pip_install().requirements_size(), 6);
  EXPECT_THAT(PiecesAfter(SeedAfterPreflight(), *d.plan), Each(Pair(_, "13.2")));
}

TEST(CatchTwentyTwo, HeaderMismatchWithCompiler132MovesTheHeadersUpNotTheCompilerDown) {
  ToolchainSnapshot s = FixedSnapshot();  // nvcc 13.2 ...
  std::map<std::string, std::string> packages = kSet130;
  packages["nvidia-cuda-nvcc"] = "13.2.78";  // ... over a 13.0 runtime: headers 13.0
  SetPackages(&s, packages);
  s.set_cudart_header_version("13.0");
  s.set_nvvm_version("13.0");
  PlannerDecision d = Planner().Plan(Diag("cuda_header_mismatch"), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_EQ(d.plan->cuda_release, "13.2");
  const std::map<std::string, std::string> after = PiecesAfter(s, *d.plan);
  EXPECT_THAT(after, Each(Pair(_, "13.2")));
  EXPECT_EQ(after.size(), 6u);
  EXPECT_THAT(Described(*d.plan), Each(Not(HasSubstr("==13.0"))));
  EXPECT_THAT(d.plan->causes, Contains("cuda_header_mismatch"));
}

TEST(CatchTwentyTwo, PtxLearntEarlierStillRulesOutTheLowerRelease) {
  // The PTX 9.2 learnt from a ptxas failure (remediation rem-1, later rolled back) is a
  // constraint now too: a header mismatch 13.0/13.1 must not be answered with 13.1.
  ToolchainSnapshot s = SeedAfterPreflight();
  std::map<std::string, std::string> packages = kSet130;
  packages["nvidia-cuda-nvcc"] = "13.0.88";
  packages["nvidia-cuda-runtime"] = "13.1.80";
  SetPackages(&s, packages);
  s.set_cudart_header_version("13.1");
  PlannerInput in = Input(s, FixedSpec());
  const Diagnosis ptx = PtxDiag();
  RemediationPlan earlier;
  earlier.fingerprint = "0000000000000001";
  earlier.causes = {"ptx_version_unsupported"};
  in.history.push_back(Past("rem-1", earlier, RemediationOutcome::kRolledBack, &ptx));
  PlannerDecision d = Planner().Plan(Diag("cuda_header_mismatch"), in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_EQ(d.plan->cuda_release, "13.2");
  EXPECT_THAT(PiecesAfter(s, *d.plan), Each(Pair(_, "13.2")));
}

// --- Each single broken condition of the seed cascade --------------------------------------------

TEST(SingleBreak, LoaderPath) {
  ToolchainSnapshot s = FixedSnapshot();
  s.set_libnvrtc_loadable(false);
  s.set_libcudart_loadable(false);
  ServerSpec spec = FixedSpec();
  spec.mutable_env()->erase("LD_LIBRARY_PATH");
  const Diagnosis missing = Diag("missing_shared_library", {{"library", "libnvrtc.so.13"}});
  for (bool preflight : {true, false}) {
    PlannerDecision d =
        preflight ? Planner().Preflight(Input(s, spec)) : Planner().Plan(missing, Input(s, spec));
    ASSERT_TRUE(d.plan.has_value());
    EXPECT_THAT(Described(*d.plan), ElementsAre("prepend_path LD_LIBRARY_PATH " + Cuda("/lib")));
    EXPECT_THAT(d.plan->causes, ElementsAre("missing_shared_library"));
    // The loader path is no JIT change: no canary needed.
    EXPECT_FALSE(d.plan->affects_jit_build);
    EXPECT_FALSE(d.plan->save_package_set);
  }
}

TEST(SingleBreak, Nvcc) {
  ToolchainSnapshot s = FixedSnapshot();
  std::map<std::string, std::string> packages = Set132();
  packages.erase("nvidia-cuda-nvcc");
  SetPackages(&s, packages);
  s.clear_nvcc();
  s.clear_ptxas();
  s.clear_ptx_isa_max();
  PlannerDecision d = Planner().Plan(Diag("nvcc_not_found"), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  // The compiler of the headers' release; CUDA_HOME and PATH already name the pip root.
  EXPECT_THAT(Described(*d.plan), ElementsAre("pip_install nvidia-cuda-nvcc==13.2.78"));
  EXPECT_THAT(d.plan->causes, ElementsAre("nvcc_not_found"));
}

TEST(SingleBreak, NvccInstalledButNotFound) {
  ToolchainSnapshot s = SeedAfterPreflight();
  s.clear_nvcc();
  s.clear_ptxas();
  s.clear_cuda_home();
  ServerSpec spec = SeedSpec();  // no CUDA_HOME, the pip bin not on PATH
  PlannerDecision d = Planner().Plan(Diag("nvcc_not_found"), Input(s, spec));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan),
              ElementsAre("set_env CUDA_HOME=" + Cuda(""), "prepend_path PATH " + Cuda("/bin")));
}

TEST(SingleBreak, NvccFoundButNotOnThePathGetsOnlyThePath) {
  ServerSpec spec = FixedSpec();
  (*spec.mutable_env())["PATH"] = "/w/venv/bin:/w/bin";
  PlannerDecision d = Planner().Preflight(Input(FixedSnapshot(), spec));
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_THAT(Described(*d.plan), ElementsAre("prepend_path PATH " + Cuda("/bin")));
  EXPECT_THAT(d.plan->causes, ElementsAre("nvcc_not_found"));
}

TEST(SingleBreak, TorchBuiltForCuda12IsNotGivenACuda13Toolkit) {
  ToolchainSnapshot s = SeedSnapshot();
  s.clear_pip_cuda_dir();
  s.clear_cuda_root();
  s.clear_cuda_root_source();
  SetPackages(&s, {{"torch", "2.9.1+cu128"}});
  PlannerDecision d = Planner().Plan(Diag("nvcc_not_found"), Input(s, SeedSpec()));
  ASSERT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("CUDA 12.x (the Python stack's)"));
}

TEST(SingleBreak, Ninja) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  PlannerDecision d = Planner().Plan(Diag("ninja_not_found"), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan), ElementsAre("apt_install ninja-build"));
  EXPECT_TRUE(d.plan->affects_jit_build);
}

TEST(Elsewhere, ANinjaInTheSearchPathGoesOnThePathInsteadOfAnInstall) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  s.set_ninja_elsewhere("/usr/local/bin/ninja");
  PlannerDecision d = Planner().Plan(Diag("ninja_not_found"), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan), ElementsAre("prepend_path PATH /usr/local/bin"));
  // Without prepend_path in the policy, the install it would have made.
  Policy policy = AutoPolicy();
  policy.add_allowed_actions("apt_install");
  d = Planner().Plan(Diag("ninja_not_found"), Input(s, FixedSpec(), policy));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan), ElementsAre("apt_install ninja-build"));
}

TEST(Elsewhere, AWrongCudaHomeIsPointedAtTheToolkitThatFits) {
  // A system toolkit stack (torch for CUDA 12), CUDA_HOME at a directory without nvcc.
  ToolchainSnapshot s;
  s.set_cuda_home("/nonexistent");
  s.set_cuda_root("/nonexistent");
  s.set_cuda_root_source("CUDA_HOME");
  SetPackages(&s, {{"torch", "2.6.0+cu124"}});
  s.set_driver_cuda_version("12.8");
  for (const auto& [root, version] : std::vector<std::pair<std::string, std::string>>{
           {"/usr/local/cuda-13.0", "13.0"},  // not the stack's major
           {"/usr/local/cuda-12.9", "12.9"},  // newer than the driver
           {"/usr/local/cuda-12.4", "12.4"}}) {
    fleet::v1::Tool* t = s.add_toolkits_elsewhere();
    t->set_path(root);
    t->set_version(version);
  }
  s.mutable_ninja()->set_path("/usr/bin/ninja");
  s.mutable_ninja()->set_version("1.11.1");
  s.set_libnvrtc_loadable(true);
  s.set_libcudart_loadable(true);
  ServerSpec spec = SeedSpec();
  (*spec.mutable_env())["CUDA_HOME"] = "/nonexistent";
  PlannerDecision d = Planner().Plan(Diag("nvcc_not_found"), Input(s, spec));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan), ElementsAre("set_env CUDA_HOME=/usr/local/cuda-12.4",
                                              "prepend_path PATH /usr/local/cuda-12.4/bin"));
  // Nothing fits the PTX a failure asked for: no pointer at a toolkit that would fail the same.
  PlannerInput in = Input(s, spec);
  PastRemediation past;
  past.id = "1";
  past.outcome = RemediationOutcome::kFailed;
  const Diagnosis ptx = Diag("ptx_version_unsupported", {{"ptx_wanted", "9.9"}});
  past.trigger_facts.assign(ptx.facts().begin(), ptx.facts().end());
  in.history.push_back(past);
  d = Planner().Plan(Diag("nvcc_not_found"), in);
  if (d.plan) {
    EXPECT_THAT(Described(*d.plan), Not(Contains(HasSubstr("/usr/local/cuda-12.4"))));
  }
}

TEST(SingleBreak, Headers) {
  ToolchainSnapshot s = FixedSnapshot();
  std::map<std::string, std::string> packages = Set132();
  packages["nvidia-cuda-runtime"] = "13.0.96";
  SetPackages(&s, packages);
  s.set_cudart_header_version("13.0");
  // The probe sees it: preflight and the diagnosis give the same plan.
  for (bool preflight : {true, false}) {
    PlannerDecision d = preflight
                            ? Planner().Preflight(Input(s, FixedSpec()))
                            : Planner().Plan(Diag("cuda_header_mismatch"), Input(s, FixedSpec()));
    ASSERT_TRUE(d.plan.has_value());
    EXPECT_THAT(Described(*d.plan), ElementsAre("pip_install nvidia-cuda-runtime==13.2.75"));
  }
}

TEST(SingleBreak, PtxasIsInvisibleToPreflightAndLearntFromItsFailure) {
  ToolchainSnapshot s = SeedAfterPreflight();  // all 13.0: consistent, only PTX 9.0
  PlannerDecision pre = Planner().Preflight(Input(s, FixedSpec()));
  EXPECT_FALSE(pre.plan.has_value());
  PlannerDecision d = Planner().Plan(PtxDiag(), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_EQ(d.plan->cuda_release, "13.2");
}

TEST(SingleBreak, NvvmNewerThanPtxasIsSeenByPreflight) {
  ToolchainSnapshot s = SeedAfterPreflight();
  std::map<std::string, std::string> packages = kSet130;
  packages["nvidia-cuda-nvcc"] = "13.0.88";
  packages["nvidia-nvvm"] = "13.2.78";
  SetPackages(&s, packages);
  s.set_nvvm_version("13.2");
  PlannerDecision d = Planner().Preflight(Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_THAT(d.plan->causes, Contains("ptx_version_unsupported"));
  EXPECT_EQ(d.plan->cuda_release, "13.2");  // up to nvvm, not nvvm down
}

TEST(SingleBreak, LinkStub) {
  ToolchainSnapshot s = FixedSnapshot();
  s.set_cuda_lib64_present(false);
  s.clear_libcuda_stub();
  s.clear_libcudart_unversioned();
  PlannerDecision d =
      Planner().Plan(Diag("link_error", {{"link_library", "-lcuda"}}), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan),
              ElementsAre("symlink " + Cuda("/lib64") + " -> lib",
                          "symlink " + Cuda("/lib/libcudart.so") + " -> libcudart.so.13",
                          "symlink " + Cuda("/lib/stubs/libcuda.so") + " -> " + kLibcuda));
}

TEST(SingleBreak, CompleteLayoutWithALinkErrorIsAReport) {
  PlannerDecision d = Planner().Plan(Diag("link_error", {{"link_library", "-lfoo"}}),
                                     Input(FixedSnapshot(), FixedSpec()));
  ASSERT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("complete"));
}

// --- Negatives: never a toolchain action
// -----------------------------------------------------------

TEST(Negatives, AreReportsWithEvidenceEvenOnABrokenToolchain) {
  // The seed snapshot has five problems a plan would fix; none of these classes may trigger one.
  const std::map<std::string, bool> transient = {{"cuda_out_of_memory", true},
                                                 {"port_in_use", true},
                                                 {"nccl_error", true},
                                                 {"model_not_found", false},
                                                 {"gpu_driver_unavailable", false},
                                                 {"abi_mismatch", false},
                                                 {"jit_build_failed", false},
                                                 {"unknown", true},
                                                 {"child_process_failed", true},
                                                 {"runtime_watchdog", true},
                                                 {"startup_stalled", true},
                                                 {"none", false}};
  for (const auto& [cls, retry] : transient) {
    SCOPED_TRACE(cls);
    PlannerDecision d = Planner().Plan(Diag(cls), Input(SeedSnapshot(), SeedSpec()));
    ASSERT_TRUE(d.report.has_value());
    EXPECT_FALSE(d.plan.has_value());
    EXPECT_EQ(d.report->diagnosis_class, cls);
    EXPECT_EQ(d.report->retry_with_backoff, retry);
    EXPECT_THAT(d.report->reason, HasSubstr(cls));
    if (cls != "none") {
      ASSERT_EQ(d.report->evidence.size(), 1u);
      EXPECT_EQ(d.report->evidence[0].line(), 42);
    }
  }
}

TEST(Negatives, TheSignaturesReportVerdictWinsOverItsClass) {
  // other_library_missing: a missing_shared_library that is not a CUDA toolkit library.
  PlannerDecision d =
      Planner().Plan(Diag("missing_shared_library", {{"library", "libfoo.so.1"}}, "report"),
                     Input(SeedSnapshot(), SeedSpec()));
  EXPECT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  // torch without this arch: unsupported_gpu_arch that no toolchain change fixes.
  d = Planner().Plan(Diag("unsupported_gpu_arch", {{"gpu_arch", "sm_120"}}, "report"),
                     Input(FixedSnapshot(), FixedSpec()));
  EXPECT_TRUE(d.report.has_value());
}

TEST(Negatives, PtxBeyondEveryReleaseTheDriverAllowsIsAReport) {
  PlannerDecision d = Planner().Plan(
      Diag("ptx_version_unsupported", {{"ptx_wanted", "9.3"}, {"ptx_supported", "9.2"}}),
      Input(FixedSnapshot(), FixedSpec()));
  ASSERT_TRUE(d.report.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("PTX 9.3"));
}

TEST(Driver, NoReleaseAboveTheDriversIsChosen) {
  ToolchainSnapshot s = FixedSnapshot();
  s.set_driver_cuda_version("13.1");
  std::map<std::string, std::string> packages = kSet130;
  packages["nvidia-cuda-nvcc"] = "13.2.78";
  SetPackages(&s, packages);
  s.set_cudart_header_version("13.0");
  s.set_nvvm_version("13.0");
  PlannerDecision d = Planner().Plan(Diag("cuda_header_mismatch"), Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_EQ(d.plan->cuda_release, "13.1");
  EXPECT_THAT(PiecesAfter(s, *d.plan), Each(Pair(_, "13.1")));
}

// --- History: failed fixes, caps, rollbacks ------------------------------------------------------

TEST(History, SameClassBackAfterAFixIsAFailedFixAndItsPlanIsNotReapplied) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  RemediationPlanner planner = Planner();
  const Diagnosis ninja = Diag("ninja_not_found");
  PlannerDecision first = planner.Plan(ninja, Input(s, FixedSpec()));
  ASSERT_TRUE(first.plan.has_value());
  ASSERT_THAT(Described(*first.plan), ElementsAre("apt_install ninja-build"));

  // apt-get "worked" but ninja is still not on the server's PATH, and the start fails again.
  PlannerInput in = Input(s, FixedSpec());
  in.history.push_back(Past("rem-7", *first.plan, RemediationOutcome::kApplied, &ninja));
  PlannerDecision again = planner.Plan(ninja, in);
  EXPECT_THAT(again.failed_remediations, ElementsAre("rem-7"));
  ASSERT_TRUE(again.plan.has_value()) << again.report->reason;
  EXPECT_NE(again.plan->fingerprint, first.plan->fingerprint);
  EXPECT_THAT(Described(*again.plan),
              ElementsAre("pip_install ninja==1.13.0"));  // the venv's bin is on PATH already
}

TEST(History, AFailedPlanWithNoAlternativeIsAReportSayingSo) {
  RemediationPlanner planner = Planner();
  const Diagnosis ptx = PtxDiag();
  PlannerInput in = Input(SeedAfterPreflight(), FixedSpec());
  PlannerDecision first = planner.Plan(ptx, in);
  ASSERT_TRUE(first.plan.has_value());
  // pip did not take: the probe still shows 13.0, and ptxas fails the same way.
  in.history.push_back(Past("rem-2", *first.plan, RemediationOutcome::kApplied, &ptx));
  PlannerDecision again = planner.Plan(ptx, in);
  EXPECT_THAT(again.failed_remediations, ElementsAre("rem-2"));
  ASSERT_TRUE(again.report.has_value());
  EXPECT_FALSE(again.plan.has_value());
  EXPECT_THAT(again.report->reason, HasSubstr("already failed"));
  EXPECT_THAT(again.report->reason, HasSubstr("rem-2"));
}

TEST(History, RolledBackPlanIsNeverTriedAgain) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  PlannerDecision first = Planner().Preflight(Input(s, FixedSpec()));
  ASSERT_TRUE(first.plan.has_value());
  PlannerInput in = Input(s, FixedSpec());
  in.history.push_back(Past("rem-3", *first.plan, RemediationOutcome::kRolledBack));
  PlannerDecision again = Planner().Preflight(in);
  ASSERT_TRUE(again.plan.has_value());
  EXPECT_NE(again.plan->fingerprint, first.plan->fingerprint);
}

TEST(History, CapReachedIsAReportWithTheReason) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  PlannerInput in = Input(s, FixedSpec());
  in.policy.set_name("careful");
  in.policy.set_max_fixes_per_cause(2);
  RemediationPlan past;
  past.causes = {"ninja_not_found"};
  past.fingerprint = "00000000000000aa";
  in.history.push_back(Past("rem-1", past, RemediationOutcome::kFailed));
  past.fingerprint = "00000000000000bb";
  in.history.push_back(Past("rem-2", past, RemediationOutcome::kApplied));
  PlannerDecision d = Planner().Plan(Diag("ninja_not_found"), in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("2 remediations already (rem-1, rem-2)"));
  EXPECT_THAT(d.report->reason, HasSubstr("max_fixes_per_cause 2"));
  EXPECT_THAT(d.failed_remediations, ElementsAre("rem-2"));

  // The default cap is 3.
  in.policy.clear_max_fixes_per_cause();
  EXPECT_TRUE(Planner().Plan(Diag("ninja_not_found"), in).plan.has_value());
  in.history.push_back(Past("rem-3", past, RemediationOutcome::kFailed));
  EXPECT_THAT(Planner().Plan(Diag("ninja_not_found"), in).report->reason,
              HasSubstr("max_fixes_per_cause 3"));
}

// --- Policy -------------------------------------------------------------------------------------

TEST(Policy, WithoutAptNinjaComesFromPipIntoTheVenv) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  ServerSpec spec = FixedSpec();
  (*spec.mutable_env())["PATH"] = Cuda("/bin") + ":/w/bin";  // the venv's bin is not on it
  PlannerInput in = Input(s, spec);
  for (const char* kind : {"set_env", "prepend_path", "pip_install", "symlink"}) {
    in.policy.add_allowed_actions(kind);
  }
  PlannerDecision d = Planner().Plan(Diag("ninja_not_found"), in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_THAT(Described(*d.plan),
              ElementsAre("pip_install ninja==1.13.0", "prepend_path PATH /w/venv/bin"));
  EXPECT_THAT(Described(*d.plan), Each(Not(StartsWith("apt_install"))));
}

TEST(Policy, WhenNoAllowedActionWorksItIsAReportNamingThePolicy) {
  ToolchainSnapshot s = FixedSnapshot();
  s.clear_ninja();
  PlannerInput in = Input(s, FixedSpec());
  in.policy.set_name("locked");
  in.policy.add_allowed_actions("set_env");
  PlannerDecision d = Planner().Plan(Diag("ninja_not_found"), in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_FALSE(d.plan.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("policy locked allows neither"));
}

TEST(Policy, PreflightKeepsWhatItMayDoAndListsTheRest) {
  PlannerInput in = Input(SeedSnapshot(), SeedSpec());
  for (const char* kind : {"set_env", "prepend_path", "pip_install", "apt_install"}) {
    in.policy.add_allowed_actions(kind);
  }
  PlannerDecision d = Planner().Preflight(in);
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_THAT(Described(*d.plan), Each(Not(StartsWith("symlink"))));
  EXPECT_THAT(d.plan->unresolved, Contains(HasSubstr("link_error: needs symlink")));
}

TEST(Policy, RemediationOffIsAReport) {
  PlannerInput in = Input(SeedSnapshot(), SeedSpec());
  in.policy.set_remediation(Policy::OFF);
  EXPECT_THAT(Planner().Preflight(in).report->reason, HasSubstr("remediation is off"));
  EXPECT_FALSE(Planner().Plan(Diag("ninja_not_found"), in).plan.has_value());
}

// --- Fallbacks, env, JIT cache -------------------------------------------------------------------

TEST(Fallbacks, CudaGraphsAreTurnedOffOnlyWhereThePolicyAllows) {
  PlannerInput in = Input(FixedSnapshot(), FixedSpec());
  PlannerDecision d = Planner().Plan(Diag("cuda_graph_capture_failed"), in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("does not allow fallbacks"));

  in.policy.set_allow_fallbacks(true);
  d = Planner().Plan(Diag("cuda_graph_capture_failed"), in);
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_THAT(Described(*d.plan), ElementsAre("add_server_args --disable-cuda-graph"));
  EXPECT_TRUE(d.plan->degraded);
  EXPECT_FALSE(d.plan->affects_jit_build);
}

TEST(Fallbacks, AttentionBackendMovesAwayFromTheFailingOne) {
  ServerSpec spec = FixedSpec();
  spec.add_argv("--attention-backend");
  spec.add_argv("fa3");
  PlannerInput in = Input(FixedSnapshot(), spec);
  in.policy.set_allow_fallbacks(true);
  PlannerDecision d =
      Planner().Plan(Diag("attention_backend_unsupported", {{"attention_backend", "fa3"}}), in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_TRUE(d.plan->degraded);
  const ServerSpec after = ApplyToSpec(*d.plan, spec);
  std::vector<std::string> argv(after.argv().begin(), after.argv().end());
  EXPECT_THAT(argv, Not(Contains("fa3")));
  EXPECT_THAT(std::vector<std::string>(argv.end() - 2, argv.end()),
              ElementsAre("--attention-backend", "triton"));
}

// vLLM's fallbacks (issue 18): its backend is chosen by VLLM_ATTENTION_BACKEND, and the share
// of GPU memory it takes is lowered only for its startup check of free memory.
ServerSpec VllmSpec() {
  ServerSpec spec = FixedSpec();
  spec.set_engine("vllm");
  return spec;
}

TEST(Fallbacks, VllmCudaGraphsAreTurnedOffWithEnforceEager) {
  PlannerInput in = Input(FixedSnapshot(), VllmSpec());
  in.policy.set_allow_fallbacks(true);
  PlannerDecision d = Planner().Plan(Diag("cuda_graph_capture_failed"), in);
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_THAT(Described(*d.plan), ElementsAre("add_server_args --enforce-eager"));
}

TEST(Fallbacks, VllmAttentionBackendMovesAwayFromTheFailingOneInItsVariable) {
  ServerSpec spec = VllmSpec();
  (*spec.mutable_env())["VLLM_ATTENTION_BACKEND"] = "FLASHINFER";
  PlannerInput in = Input(FixedSnapshot(), spec);
  PlannerDecision d = Planner().Plan(Diag("attention_backend_unsupported"), in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("does not allow fallbacks"));
  in.policy.set_allow_fallbacks(true);
  d = Planner().Plan(Diag("attention_backend_unsupported"), in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_TRUE(d.plan->degraded);
  EXPECT_EQ(d.plan->env_changes.at("VLLM_ATTENTION_BACKEND"), "TRITON_ATTN");
  // Unset: the failing one is the diagnosis's fact.
  in.spec = VllmSpec();
  d = Planner().Plan(Diag("attention_backend_unsupported", {{"attention_backend", "flashinfer"}}),
                     in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_EQ(d.plan->env_changes.at("VLLM_ATTENTION_BACKEND"), "TRITON_ATTN");
  EXPECT_THAT(Described(*d.plan), Each(Not(HasSubstr("--attention-backend"))));
  // The fallback failed too: the next in the list, not the first again.
  (*in.spec.mutable_env())["VLLM_ATTENTION_BACKEND"] = "TRITON_ATTN";
  d = Planner().Plan(Diag("attention_backend_unsupported"), in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_EQ(d.plan->env_changes.at("VLLM_ATTENTION_BACKEND"), "FLEX_ATTENTION");
  (*in.spec.mutable_env())["VLLM_ATTENTION_BACKEND"] = "FLEX_ATTENTION";
  d = Planner().Plan(Diag("attention_backend_unsupported"), in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("no other vLLM attention backend"));
}

TEST(Fallbacks, VllmGpuMemoryUtilizationIsLoweredToWhatIsFree) {
  ServerSpec spec = VllmSpec();
  spec.add_argv("--gpu-memory-utilization");
  spec.add_argv("0.9");
  PlannerInput in = Input(FixedSnapshot(), spec);
  in.policy.set_allow_fallbacks(true);
  const Diagnosis oom = Diag(
      "cuda_out_of_memory",
      {{"gpu_free_gib", "60.00"}, {"gpu_total_gib", "95.00"}, {"gpu_memory_utilization", "0.9"}},
      "launch_flags");
  PlannerDecision d = Planner().Plan(oom, in);
  ASSERT_TRUE(d.plan.has_value()) << d.report->reason;
  EXPECT_TRUE(d.plan->degraded);
  EXPECT_FALSE(d.plan->affects_jit_build);
  const ServerSpec after = ApplyToSpec(*d.plan, spec);
  std::vector<std::string> argv(after.argv().begin(), after.argv().end());
  EXPECT_THAT(argv, Not(Contains("0.9")));
  // 60/95 = 0.63, less 0.02.
  EXPECT_THAT(std::vector<std::string>(argv.end() - 2, argv.end()),
              ElementsAre("--gpu-memory-utilization", "0.61"));

  // Not without the policy's fallbacks; not for SGLang; not with too little free; not for an
  // out of memory that does not say what is free; never for a toolchain failure.
  in.policy.set_allow_fallbacks(false);
  EXPECT_FALSE(Planner().Plan(oom, in).plan.has_value());
  in.policy.set_allow_fallbacks(true);
  PlannerInput sglang = Input(FixedSnapshot(), FixedSpec());
  sglang.policy.set_allow_fallbacks(true);
  EXPECT_FALSE(Planner().Plan(oom, sglang).plan.has_value());
  const Diagnosis little = Diag(
      "cuda_out_of_memory",
      {{"gpu_free_gib", "5.00"}, {"gpu_total_gib", "95.00"}, {"gpu_memory_utilization", "0.9"}},
      "launch_flags");
  d = Planner().Plan(little, in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("free the GPU"));
  EXPECT_FALSE(Planner().Plan(Diag("cuda_out_of_memory", {}, "launch_flags"), in).plan.has_value());
  // Without a plan the out of memory is still retried with backoff, as the class is.
  in.policy.set_allow_fallbacks(false);
  d = Planner().Plan(oom, in);
  ASSERT_TRUE(d.report.has_value());
  EXPECT_TRUE(d.report->retry_with_backoff);
}

TEST(Env, OomKilledJitStepsHalveMaxJobs) {
  ServerSpec spec = FixedSpec();
  PlannerDecision d = Planner().Plan(Diag("jit_oom_killed"), Input(FixedSnapshot(), spec));
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_EQ(d.plan->env_changes.at("MAX_JOBS"), "4");
  EXPECT_TRUE(d.plan->affects_jit_build);
  (*spec.mutable_env())["MAX_JOBS"] = "4";
  d = Planner().Plan(Diag("jit_oom_killed"), Input(FixedSnapshot(), spec));
  EXPECT_EQ(d.plan->env_changes.at("MAX_JOBS"), "2");
  (*spec.mutable_env())["MAX_JOBS"] = "1";
  d = Planner().Plan(Diag("jit_oom_killed"), Input(FixedSnapshot(), spec));
  ASSERT_TRUE(d.report.has_value());
  EXPECT_THAT(d.report->reason, HasSubstr("already 1"));
}

TEST(JitCache, StaleArtefactClearsTheCacheDirHoldingIt) {
  ToolchainSnapshot s = FixedSnapshot();
  s.add_jit_cache_dirs("/w/root/.cache/flashinfer");
  s.add_jit_cache_dirs("/w/root/.cache/torch_extensions");
  PlannerDecision d = Planner().Plan(
      Diag("stale_jit_cache", {{"path", "/w/root/.cache/flashinfer/0.5.3/120/cached_ops/x.so"}}),
      Input(s, FixedSpec()));
  ASSERT_TRUE(d.plan.has_value());
  EXPECT_THAT(Described(*d.plan), ElementsAre("clear_jit_cache /w/root/.cache/flashinfer"));
}

}  // namespace
}  // namespace fleet::daemon

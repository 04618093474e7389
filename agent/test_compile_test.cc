#include "agent/test_compile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/toolchain_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using ::fleet::sim::testing::SimWorld;
using ::fleet::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string FactOf(const fleet::v1::Diagnosis& d, const std::string& key) {
  for (const fleet::v1::Fact& f : d.facts()) {
    if (f.key() == key && !f.values().empty()) return f.values(0);
  }
  return "";
}

TEST(GencodeTargets, ArchSpecificFromSm90OnFamilyFromSm100OnWhereTheReleaseKnowsItEachOnce) {
  EXPECT_THAT(GencodeTargets({"12.0", "12.0", "9.0", "8.6", "x", "12", ""}),
              ElementsAre("sm_120a", "sm_90a", "sm_86"));
  EXPECT_THAT(GencodeTargets({"12.0", "9.0", "10.0"}, "13.0"),
              ElementsAre("sm_120a", "sm_120f", "sm_90a", "sm_100a", "sm_100f"));
  EXPECT_THAT(GencodeTargets({"12.0"}, "12.9"), ElementsAre("sm_120a", "sm_120f"));
  EXPECT_THAT(GencodeTargets({"12.0"}, "12.8"), ElementsAre("sm_120a"));
}

// ---------------------------------------------------------------------------------------------
// The simulated worlds, through the whole probe (the world's nvcc, ptxas and c++ judge the build
// as the real tools do; tests/sim/tools/fake-cuda-tool).

class SimWorldTestCompile : public ::testing::Test {
 protected:
  fleet::v1::ToolchainSnapshot Probe(const std::string& state,
                                     const std::vector<std::string>& breaks = {},
                                     bool test_compile = true) {
    absl::StatusOr<SimWorld> world = SimWorld::Create(
        tmp_.Join(absl::StrCat("world-", state, "-", absl::StrJoin(breaks, "-"))), state, breaks);
    EXPECT_TRUE(world.ok()) << world.status();
    if (!world.ok()) return {};
    ProbeTarget target;
    target.argv = world->ServerArgv(30000);
    target.env = world->ServerEnv();
    target.gpus = {0};
    target.dev_root = "";
    target.test_compile = test_compile;
    target.test_compile_options.tmp_root = tmp_.path();
    return ToolchainProbe(&runner_).Probe(target);
  }

  TempDir tmp_;
  PosixCommandRunner runner_{1 << 20};
};

TEST_F(SimWorldTestCompile, AFixedWorldBuildsTheKernel) {
  const fleet::v1::TestCompile t = Probe("fixed").test_compile();
  EXPECT_TRUE(t.ran());
  EXPECT_TRUE(t.ok()) << t.log();
  EXPECT_THAT(t.archs(), ElementsAre("sm_120a", "sm_120f"));  // the world's nvcc is 13.2
  EXPECT_THAT(t.log(), HasSubstr("[1/2] "));
  EXPECT_THAT(t.log(), HasSubstr("-gencode=arch=compute_120a,code=sm_120a"));
  EXPECT_THAT(t.log(), HasSubstr("-gencode=arch=compute_120f,code=sm_120f"));
  EXPECT_THAT(t.log(), HasSubstr("/flashinfer/data/include")) << "flashinfer's headers included";
  EXPECT_THAT(t.log(), HasSubstr("[2/2] c++ "));
  EXPECT_FALSE(t.has_diagnosis());
}

// The seed's problem 5, seen before any launch: the world's nvcc 13.0 with flashinfer's CCCL
// emits PTX 9.2, which its ptxas refuses. The classifier's facts say what it wanted.
TEST_F(SimWorldTestCompile, APtxasOlderThanThePtxIsSeenWithWhatItWanted) {
  const fleet::v1::TestCompile t = Probe("fixed", {"ptxas"}).test_compile();
  EXPECT_TRUE(t.ran());
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.failed_step(), "compile");
  EXPECT_THAT(t.log(), HasSubstr("Unsupported .version 9.2; current version is '9.0'"));
  EXPECT_THAT(t.log(), HasSubstr("ninja: build stopped: subcommand failed."));
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "ptx_version_unsupported") << t.log();
  EXPECT_EQ(FactOf(t.diagnosis(), "ptx_wanted"), "9.2");
  EXPECT_EQ(FactOf(t.diagnosis(), "ptx_supported"), "9.0");
}

TEST_F(SimWorldTestCompile, CompilerAndHeadersOfTwoReleasesAreAHeaderMismatch) {
  const fleet::v1::TestCompile t = Probe("fixed", {"headers"}).test_compile();
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.failed_step(), "compile");
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "cuda_header_mismatch") << t.log();
}

TEST_F(SimWorldTestCompile, ALinkLayoutWithoutTheStubIsALinkError) {
  const fleet::v1::TestCompile t = Probe("fixed", {"link_stub"}).test_compile();
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.failed_step(), "link");
  EXPECT_THAT(t.log(), HasSubstr("cannot find -lcuda"));
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "link_error") << t.log();
}

TEST_F(SimWorldTestCompile, WithoutNvccOrWhenTurnedOffItIsNotTried) {
  const fleet::v1::TestCompile none = Probe("fixed", {"nvcc"}).test_compile();
  EXPECT_FALSE(none.ran());
  EXPECT_EQ(none.skipped(), "no nvcc");
  const fleet::v1::TestCompile off = Probe("fixed", {}, /*test_compile=*/false).test_compile();
  EXPECT_FALSE(off.ran());
  EXPECT_THAT(off.skipped(), HasSubstr("preflight.test_compile: false"));
}

// A compiler that hangs is killed at the step's bound, the transcript says so, and the temp dir
// is gone; a temp root that cannot hold the dir is a reason not to run, not an error.
TEST(TestCompileFaults, AHangingCompilerIsKilledAtItsBoundAndNothingIsLeft) {
  TempDir tmp;
  tmp.WriteFile("bin/nvcc", "#!/bin/sh\nexec sleep 30\n");
  ASSERT_EQ(chmod(tmp.Join("bin/nvcc").c_str(), 0755), 0);
  fleet::v1::ToolchainSnapshot snapshot;
  snapshot.mutable_nvcc()->set_path(tmp.Join("bin/nvcc"));
  snapshot.add_gpus()->set_compute_capability("12.0");
  TestCompileOptions options;
  options.step_timeout = absl::Milliseconds(300);
  options.tmp_root = tmp.Join("scratch");
  ASSERT_EQ(mkdir(options.tmp_root.c_str(), 0700), 0);
  PosixCommandRunner runner(1 << 20);
  const fleet::v1::TestCompile t =
      RunTestCompile(&runner, snapshot, {{"PATH", "/usr/bin:/bin"}}, options);
  EXPECT_TRUE(t.ran());
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.failed_step(), "compile");
  EXPECT_THAT(t.log(), HasSubstr("FAILED: [timed out]"));
  EXPECT_THAT(t.log(), HasSubstr("ran past 300ms and was killed"));
  EXPECT_LT(t.took().seconds(), 10) << "bounded, not the compiler's 30 s";
  EXPECT_FALSE(t.has_diagnosis()) << "killed: says nothing about the toolchain";
  EXPECT_TRUE(std::filesystem::is_empty(options.tmp_root)) << "the temp dir is removed";

  options.tmp_root = tmp.Join("no/such/dir");
  const fleet::v1::TestCompile none =
      RunTestCompile(&runner, snapshot, {{"PATH", "/usr/bin:/bin"}}, options);
  EXPECT_FALSE(none.ran());
  EXPECT_THAT(none.skipped(), HasSubstr("mkdtemp"));
}

// ---------------------------------------------------------------------------------------------
// This machine's real CUDA 13.0 (nvcc, ptxas, CCCL) and its real c++ and ld.

constexpr char kRealCudaRoot[] = "/usr/local/cuda";

class RealCudaTestCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(absl::StrCat(kRealCudaRoot, "/bin/nvcc").c_str(), X_OK) != 0) {
      GTEST_SKIP() << "no CUDA toolkit at " << kRealCudaRoot << " on this machine";
    }
    snapshot_.mutable_nvcc()->set_path(absl::StrCat(kRealCudaRoot, "/bin/nvcc"));
    snapshot_.mutable_nvcc()->set_version("13.0");  // as the probe reads it: sm_120a and sm_120f
    snapshot_.set_cuda_root(kRealCudaRoot);
    snapshot_.set_include_dir(absl::StrCat(kRealCudaRoot, "/include"));
    snapshot_.add_gpus()->set_compute_capability("12.0");  // an RTX PRO 6000 Blackwell's
  }
  fleet::v1::TestCompile Run() {
    const std::map<std::string, std::string> env = {
        {"PATH", absl::StrCat(kRealCudaRoot, "/bin:/usr/bin:/bin")}, {"HOME", tmp_.path()}};
    TestCompileOptions options;
    options.tmp_root = tmp_.path();
    return RunTestCompile(&runner_, snapshot_, env, options);
  }

  fleet::v1::ToolchainSnapshot snapshot_;
  TempDir tmp_;
  PosixCommandRunner runner_{1 << 20};
};

// A variant of the real toolkit at `root`: a copy of the real nvcc (it finds its tools, headers
// and cicc from where it lies: its nvcc.profile's $(_HERE_)), everything else linked to the real
// one, except what makes it another toolchain: `cicc_emits` (a real cicc whose PTX is marked with
// that ISA, as a newer release's cicc emits it) and `headers_release` (CUDART_VERSION of the
// include dir's cuda_runtime_api.h, as another release's headers say it). Real nvcc, ptxas, CCCL
// and cicc judge the result.
void MakeToolkitVariant(const std::string& root, const std::string& cicc_emits,
                        int headers_release) {
  namespace fs = std::filesystem;
  const fs::path real = fs::canonical(kRealCudaRoot);
  fs::create_directories(fs::path(root) / "bin");
  for (const auto& e : fs::directory_iterator(real / "bin")) {
    const fs::path to = fs::path(root) / "bin" / e.path().filename();
    if (e.path().filename() == "nvcc" || e.path().filename() == "nvcc.profile") {
      fs::copy_file(e.path(), to);
    } else {
      fs::create_directory_symlink(e.path(), to);  // a file or a dir: both resolve
    }
  }
  fs::create_directories(fs::path(root) / "nvvm" / "bin");
  fs::create_directory_symlink(real / "nvvm" / "libdevice", fs::path(root) / "nvvm" / "libdevice");
  const std::string cicc = (fs::path(root) / "nvvm" / "bin" / "cicc").string();
  if (cicc_emits.empty()) {
    fs::create_symlink(real / "nvvm" / "bin" / "cicc", cicc);
  } else {
    std::ofstream(cicc)
        << "#!/bin/sh\n# the real cicc; its PTX marked .version " << cicc_emits
        << "\nout=\nprev=\nfor a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
        << (real / "nvvm" / "bin" / "cicc").string() << " \"$@\" || exit $?\n"
        << "[ -n \"$out\" ] && sed -i 's/^\\.version .*/.version " << cicc_emits
        << "/' \"$out\"\nexit 0\n";
    fs::permissions(cicc, fs::perms::owner_all);
  }
  const fs::path target = fs::path(root) / "targets" / "x86_64-linux";
  fs::create_directories(target / "include");
  fs::create_directory_symlink(real / "targets" / "x86_64-linux" / "lib", target / "lib");
  for (const auto& e : fs::directory_iterator(real / "targets" / "x86_64-linux" / "include")) {
    const fs::path to = target / "include" / e.path().filename();
    if (headers_release != 0 && e.path().filename() == "cuda_runtime_api.h") {
      std::string text = ::fleet::testing::ReadFile(e.path().string());
      const size_t at = text.find("#define CUDART_VERSION  13000");
      if (at != std::string::npos) {
        text.replace(at, 29, absl::StrCat("#define CUDART_VERSION  ", headers_release));
      }
      std::ofstream(to) << text;
    } else if (e.is_regular_file()) {
      // Files as files here (the compiler finds a header's quoted includes beside it, where this
      // cuda_runtime_api.h is): a hard link, a copy across file systems.
      std::error_code ec;
      fs::create_hard_link(e.path(), to, ec);
      if (ec) fs::copy_file(e.path(), to);
    } else {
      fs::create_directory_symlink(e.path(), to);
    }
  }
  fs::create_directory_symlink("targets/x86_64-linux/lib", fs::path(root) / "lib64");
}

// The seed's problem 5 with the real tools: a toolchain whose compiler emits PTX 9.2 beside the
// ptxas of CUDA 13.0. The real ptxas refuses it and the class and facts are the ones a server's
// JIT log gives.
TEST_F(RealCudaTestCompile, PtxNewerThanTheRealPtxasAcceptsIsPtxVersionUnsupported) {
  const std::string root = tmp_.Join("cuda-emits-9.2");
  MakeToolkitVariant(root, "9.2", 0);
  snapshot_.mutable_nvcc()->set_path(root + "/bin/nvcc");
  snapshot_.set_cuda_root(root);
  snapshot_.set_include_dir(root + "/targets/x86_64-linux/include");
  const fleet::v1::TestCompile t = Run();
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.failed_step(), "compile") << t.log();
  EXPECT_THAT(t.log(), HasSubstr("Unsupported .version 9.2; current version is '9.0'"));
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "ptx_version_unsupported") << t.log();
  EXPECT_EQ(FactOf(t.diagnosis(), "ptx_wanted"), "9.2");
  EXPECT_EQ(FactOf(t.diagnosis(), "ptx_supported"), "9.0");
}

// The seed's problem 4 with the real tools: headers of CUDA 13.2 (CUDART_VERSION 13020) before
// nvcc 13.0. The real CCCL's guard stops the compile.
TEST_F(RealCudaTestCompile, HeadersOfAnotherReleaseAreTheRealCcclHeaderMismatch) {
  const std::string root = tmp_.Join("cuda-headers-13.2");
  MakeToolkitVariant(root, "", 13020);
  snapshot_.mutable_nvcc()->set_path(root + "/bin/nvcc");
  snapshot_.set_cuda_root(root);
  snapshot_.set_include_dir(root + "/targets/x86_64-linux/include");
  const fleet::v1::TestCompile t = Run();
  EXPECT_FALSE(t.ok());
  EXPECT_THAT(t.log(), HasSubstr("CUDA compiler and CUDA toolkit headers are incompatible"));
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "cuda_header_mismatch") << t.log();
}

TEST_F(RealCudaTestCompile, TheRealToolkitBuildsAndLinksForSm120) {
  const fleet::v1::TestCompile t = Run();
  EXPECT_TRUE(t.ran());
  EXPECT_TRUE(t.ok()) << t.log();
  EXPECT_GT(t.took().seconds() * 1000 + t.took().nanos() / 1000000, 0);
  std::cout << "real test-compile took " << t.took().seconds() << "." << t.took().nanos() / 10000000
            << " s\n";
}

TEST_F(RealCudaTestCompile, AnArchTheRealNvccDoesNotKnowIsUnsupportedGpuArch) {
  snapshot_.mutable_gpus(0)->set_compute_capability("99.0");
  const fleet::v1::TestCompile t = Run();
  EXPECT_FALSE(t.ok());
  EXPECT_THAT(t.log(), HasSubstr("nvcc fatal   : Unsupported gpu architecture 'compute_990a'"));
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "unsupported_gpu_arch") << t.log();
}

TEST_F(RealCudaTestCompile, ARootWithoutItsLibrariesIsTheRealLdsLinkError) {
  // The compile uses the real toolkit; the link line points at a root with no lib64.
  snapshot_.set_cuda_root(tmp_.Join("bare-root"));
  const fleet::v1::TestCompile t = Run();
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.failed_step(), "link") << t.log();
  EXPECT_THAT(t.log(), HasSubstr("cannot find -lcudart"));
  EXPECT_THAT(t.log(), HasSubstr("collect2: error: ld returned 1 exit status"));
  EXPECT_EQ(t.diagnosis().diagnosis_class(), "link_error") << t.log();
}

}  // namespace
}  // namespace fleet::agent

// The simulated container world (make_sim_world.sh) and its package-manager shims: the seed state
// shows every problem a probe can see, the fixed state none; pip-sim and apt-get-sim change the
// tree as pip and apt-get would, and refuse names and versions that are not plain ones without
// changing anything.
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::sim::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::map<std::string, std::string> ReadConf(const std::string& path) {
  std::map<std::string, std::string> conf;
  const std::string text = fleet::testing::ReadFile(path);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const size_t eq = line.find('=');
    if (!line.empty() && line[0] != '#' && eq != std::string::npos) {
      conf[line.substr(0, eq)] = line.substr(eq + 1);
    }
    start = end + 1;
  }
  return conf;
}

class SimWorldTest : public ::testing::Test {
 protected:
  SimWorld Make(const std::string& state, const std::vector<std::string>& breaks = {}) {
    absl::StatusOr<SimWorld> world = SimWorld::Create(tmp_.Join("world"), state, breaks);
    if (!world.ok()) ADD_FAILURE() << world.status();
    return *std::move(world);
  }

  // Runs `argv` with `env` (the machine's environment when empty), output captured.
  fleet::testing::RunResult Run(const std::vector<std::string>& argv, const Env& env = {}) {
    absl::StatusOr<fleet::testing::RunResult> r = fleet::testing::Run(
        argv, {.env = env.empty() ? std::nullopt : std::optional<Env>(env),
               .output_path = tmp_.Join(absl::StrCat("run.", ++runs_, ".out"))});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : fleet::testing::RunResult{};
  }

  fleet::testing::RunResult Pip(const SimWorld& w, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {w.Path("venv/bin/pip")};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv);
  }

  fleet::testing::TempDir tmp_;
  int runs_ = 0;
};

TEST_F(SimWorldTest, SeedStateHasEveryProblemOfTheCascade) {
  SimWorld w = Make("seed");
  const std::string cuda = w.CudaDir();
  const Env env = w.ServerEnv();
  // 1: libnvrtc exists but nothing puts it on the loader path.
  EXPECT_TRUE(Exists(cuda + "/lib/libnvrtc.so.13"));
  EXPECT_EQ(env.count("LD_LIBRARY_PATH"), 0u);
  // 2: no compiler, no CUDA_HOME.
  EXPECT_FALSE(Exists(cuda + "/bin/nvcc"));
  EXPECT_EQ(env.count("CUDA_HOME"), 0u);
  // 3: no ninja on the server's PATH (which holds no system directory).
  EXPECT_EQ(fleet::testing::FindOnPath("ninja", env.at("PATH")), "");
  // 4/5: CUDA 13.0 headers; installing the 13.2 compiler alone would mismatch them.
  EXPECT_THAT(fleet::testing::ReadFile(cuda + "/include/cuda_runtime_api.h"),
              HasSubstr("#define CUDART_VERSION 13000"));
  // 6: the bare pip layout: no lib64, no unversioned libcudart, no libcuda stub.
  EXPECT_FALSE(Exists(cuda + "/lib64"));
  EXPECT_FALSE(Exists(cuda + "/lib/libcudart.so"));
  EXPECT_TRUE(Exists(cuda + "/lib/libcudart.so.13"));
}

TEST_F(SimWorldTest, RecordsWhereItsShimsAre) {
  SimWorld w = Make("seed");
  const auto conf = ReadConf(w.Path("sim-world.conf"));
  for (const char* key : {"python", "pip", "apt_get", "nvidia_smi"}) {
    ASSERT_EQ(conf.count(key), 1u) << key;
    EXPECT_TRUE(Executable(conf.at(key))) << key << "=" << conf.at(key);
  }
  EXPECT_EQ(conf.at("state"), "seed");
  EXPECT_EQ(conf.at("gpus"), "8");
  EXPECT_TRUE(Exists(conf.at("model") + "/config.json"));
  EXPECT_TRUE(Exists(conf.at("driver_libcuda")));
}

TEST_F(SimWorldTest, FixedStateHasCuda132ThroughoutAndTheLinkLayout) {
  SimWorld w = Make("fixed");
  const std::string cuda = w.CudaDir();
  const Env env = w.ServerEnv();
  EXPECT_EQ(env.at("CUDA_HOME"), cuda);
  EXPECT_EQ(env.at("LD_LIBRARY_PATH"), cuda + "/lib");
  EXPECT_THAT(Run({cuda + "/bin/nvcc", "--version"}, env).output,
              HasSubstr("Cuda compilation tools, release 13.2, V13.2.78"));
  EXPECT_THAT(Run({cuda + "/bin/ptxas", "--version"}, env).output, HasSubstr("release 13.2"));
  EXPECT_THAT(fleet::testing::ReadFile(cuda + "/include/cuda_runtime_api.h"),
              HasSubstr("#define CUDART_VERSION 13020"));
  const std::string ninja = fleet::testing::FindOnPath("ninja", env.at("PATH"));
  ASSERT_NE(ninja, "");
  EXPECT_EQ(Run({ninja, "--version"}, env).exit_code, 0);
  EXPECT_TRUE(Exists(cuda + "/lib64/libcudart.so"));
  EXPECT_TRUE(Exists(cuda + "/lib64/stubs/libcuda.so"));
  const std::string freeze = Pip(w, {"freeze"}).output;
  for (const char* pkg :
       {"nvidia-cuda-nvcc==13.2", "nvidia-cuda-crt==13.2", "nvidia-nvvm==13.2",
        "nvidia-cuda-runtime==13.2", "nvidia-cuda-nvrtc==13.2", "nvidia-cuda-cupti==13.2"}) {
    EXPECT_THAT(freeze, HasSubstr(pkg));
  }
}

TEST_F(SimWorldTest, PipInstallChangesTheCompilerItsBannerAndDistInfo) {
  SimWorld w = Make("seed");
  const std::string nvcc = w.CudaDir() + "/bin/nvcc";
  fleet::testing::RunResult r = Pip(w, {"install", "nvidia-cuda-nvcc==13.0.88"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Successfully installed nvidia-cuda-nvcc-13.0.88"));
  EXPECT_THAT(Run({nvcc, "--version"}).output,
              HasSubstr("Cuda compilation tools, release 13.0, V13.0.88"));
  EXPECT_THAT(fleet::testing::ReadFile(w.Path(
                  "venv/lib/python3.12/site-packages/nvidia_cuda_nvcc-13.0.88.dist-info/METADATA")),
              HasSubstr("Name: nvidia-cuda-nvcc\nVersion: 13.0.88\n"));

  r = Pip(w, {"install", "-U", "nvidia-cuda-nvcc==13.2.*"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Successfully uninstalled nvidia-cuda-nvcc-13.0.88"));
  EXPECT_THAT(Run({nvcc, "--version"}).output, HasSubstr("release 13.2, V13.2.78"));
  EXPECT_THAT(Run({w.CudaDir() + "/bin/ptxas", "--version"}).output,
              HasSubstr("ptxas: NVIDIA (R) Ptx optimizing assembler"));
  EXPECT_FALSE(
      Exists(w.Path("venv/lib/python3.12/site-packages/nvidia_cuda_nvcc-13.0.88.dist-info")));
  EXPECT_THAT(Pip(w, {"list"}).output, HasSubstr("nvidia-cuda-nvcc    13.2.78"));
}

TEST_F(SimWorldTest, PipInstallOfTheRuntimeMovesTheHeaders) {
  SimWorld w = Make("seed");
  ASSERT_EQ(Pip(w, {"install", "nvidia-cuda-runtime==13.2.75"}).exit_code, 0);
  EXPECT_THAT(fleet::testing::ReadFile(w.CudaDir() + "/include/cuda_runtime_api.h"),
              HasSubstr("#define CUDART_VERSION 13020"));
}

TEST_F(SimWorldTest, PipUninstallRemovesWhatItsRecordLists) {
  SimWorld w = Make("fixed");
  const fleet::testing::RunResult r = Pip(w, {"uninstall", "-y", "nvidia-cuda-nvcc"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(Exists(w.CudaDir() + "/bin/nvcc"));
  EXPECT_FALSE(Exists(w.CudaDir() + "/bin/ptxas"));
  EXPECT_THAT(Pip(w, {"freeze"}).output, Not(HasSubstr("nvidia-cuda-nvcc")));
}

TEST_F(SimWorldTest, PipRefusesWhatIsNotAPlainNameOrVersionAndChangesNothing) {
  SimWorld w = Make("seed");
  const std::string before = Pip(w, {"freeze"}).output;
  for (const std::string bad :
       {"nvidia-cuda-nvcc;rm -rf /", "nvidia-cuda-nvcc==13.2.78$(id)", "../etc/passwd",
        "nvidia cuda", "nvidia-cuda-nvcc==13.2; touch x", "nvidia-cuda-nvcc>=13", "-e."}) {
    const fleet::testing::RunResult r = Pip(w, {"install", "nvidia-cuda-runtime==13.2.75", bad});
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_THAT(r.output, Not(HasSubstr("Successfully installed"))) << bad;
  }
  EXPECT_EQ(Pip(w, {"freeze"}).output, before);
  const fleet::testing::RunResult missing = Pip(w, {"install", "nvidia-cuda-nvcc==14.0"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output,
              HasSubstr("ERROR: Could not find a version that satisfies the requirement "
                        "nvidia-cuda-nvcc==14.0 (from versions: 13.0.88, 13.1.80, 13.2.78)"));
  EXPECT_FALSE(Exists(w.CudaDir() + "/bin/nvcc"));
}

TEST_F(SimWorldTest, PipInstallsNinjaIntoTheVenv) {
  SimWorld w = Make("seed");
  ASSERT_EQ(Pip(w, {"install", "ninja"}).exit_code, 0);
  EXPECT_EQ(Run({w.Path("venv/bin/ninja"), "--version"}).exit_code, 0);
  ASSERT_EQ(Pip(w, {"uninstall", "-y", "ninja"}).exit_code, 0);
  EXPECT_FALSE(Exists(w.Path("venv/bin/ninja")));
}

TEST_F(SimWorldTest, AptGetInstallsAWorkingNinjaIntoTheWorldsBin) {
  SimWorld w = Make("seed");
  fleet::testing::RunResult r = Run({w.Path("bin/apt-get"), "install", "-y", "ninja-build"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Setting up ninja-build (1.11.1-1) ..."));
  EXPECT_EQ(Run({w.Path("bin/ninja"), "--version"}).exit_code, 0);
  EXPECT_THAT(Run({w.Path("bin/apt-get"), "install", "-y", "ninja-build"}).output,
              HasSubstr("ninja-build is already the newest version"));
  for (const std::string bad : {"ninja-build;id", "no-such-package", "Ninja", "../x"}) {
    r = Run({w.Path("bin/apt-get"), "install", "-y", bad});
    EXPECT_EQ(r.exit_code, 100) << bad;
    EXPECT_THAT(r.output, HasSubstr("E: Unable to locate package")) << bad;
  }
}

TEST_F(SimWorldTest, NvidiaSmiAnswersFromTheWorldsData) {
  SimWorld w = Make("seed");
  const Env env = w.ServerEnv();
  fleet::testing::RunResult r =
      Run({w.Path("bin/nvidia-smi"), "--query-gpu=index,name,compute_cap,memory.total",
           "--format=csv,noheader"},
          env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887 MiB\n"));
  EXPECT_THAT(r.output, HasSubstr("\n7, NVIDIA RTX PRO 6000 Blackwell Server Edition"));
  EXPECT_THAT(Run({w.Path("bin/nvidia-smi")}, env).output, HasSubstr("CUDA Version: 13.2"));
}

TEST_F(SimWorldTest, BuilderRefusesANonEmptyDirectoryAndUnknownProblems) {
  tmp_.WriteFile("busy/file", "x");
  const std::string script = fleet::testing::SourcePath("tests/sim/make_sim_world.sh");
  const std::string server = fleet::testing::BuildPath("tests/sim/sglang-server-sim");
  EXPECT_NE(Run({"bash", script, tmp_.Join("busy"), "--server", server}).exit_code, 0);
  EXPECT_NE(Run({"bash", script, tmp_.Join("w"), "--state", "fixed", "--break", "nope", "--server",
                 server})
                .exit_code,
            0);
  EXPECT_NE(
      Run({"bash", script, tmp_.Join("w2"), "--break", "ninja", "--server", server}).exit_code, 0);
}

}  // namespace
}  // namespace fleet::sim::testing

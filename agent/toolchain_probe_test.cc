#include "agent/toolchain_probe.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using ::fleet::sim::testing::SimWorld;
using ::fleet::testing::TempDir;
using ::fleet::v1::ToolchainSnapshot;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::map<std::string, std::string> Packages(const ToolchainSnapshot& s) {
  std::map<std::string, std::string> out;
  for (const auto& p : s.pip_packages()) out[p.name()] = p.version();
  return out;
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// ---------------------------------------------------------------------------------------------
// The simulated worlds (tests/sim/make_sim_world.sh), probed through the real runner: the probe
// sees them only through the server's env and argv, as it sees a real container.

class SimWorldProbe : public ::testing::Test {
 protected:
  absl::StatusOr<SimWorld> Make(const std::string& state,
                                const std::vector<std::string>& breaks = {}) {
    return SimWorld::Create(
        tmp_.Join(absl::StrCat("world-", state, "-", absl::StrJoin(breaks, "-"))), state, breaks);
  }

  // The world's GPU 0, with the world's device dir ("" in a world made without root: not looked
  // at).
  static ProbeTarget Target(const SimWorld& world) {
    ProbeTarget target;
    target.argv = world.ServerArgv(30000);
    target.env = world.ServerEnv();
    target.gpus = {0};
    target.dev_root = world.DevRoot();
    target.test_compile = false;  // the facts read, not built: test_compile_test.cc builds
    return target;
  }

  ToolchainSnapshot Probe(const ProbeTarget& target) {
    return ToolchainProbe(&runner_).Probe(target);
  }

  TempDir tmp_;
  PosixCommandRunner runner_{1 << 20};
};

// Whether this host's default library dirs (which a sim world's loader check cannot hide) hold
// `soname`: then a sim world's "not loadable" cannot be observed here.
bool HostDefaultDirsHold(const std::string& soname) {
  for (const char* dir : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                          "/usr/lib64", "/lib", "/usr/lib"}) {
    if (IsFile(absl::StrCat(dir, "/", soname))) return true;
  }
  return false;
}

TEST_F(SimWorldProbe, SeedWorldShowsWhatTheContractsSayItCanSee) {
  absl::StatusOr<SimWorld> made_world = Make("seed");
  ASSERT_TRUE(made_world.ok()) << made_world.status();
  const SimWorld& world = *made_world;
  const ToolchainSnapshot s = Probe(Target(world));
  const std::string cuda = world.CudaDir();
  SCOPED_TRACE(s.DebugString());

  // nvcc missing (and ptxas with it): no PTX ISA is known, least of all the 9.2 that flashinfer's
  // CCCL will emit (learnt from the first ptxas failure).
  EXPECT_EQ(s.cuda_home(), "");
  EXPECT_EQ(s.nvcc().path(), "");
  EXPECT_EQ(s.nvcc().version(), "");
  EXPECT_EQ(s.ptxas().path(), "");
  EXPECT_EQ(s.ptx_isa_max(), "");
  EXPECT_EQ(s.ptx_isa_source(), "");
  // ninja missing.
  EXPECT_EQ(s.ninja().path(), "");
  // libnvrtc not loadable: the pip libraries are on no loader path.
  if (HostDefaultDirsHold("libnvrtc.so.13")) {
    std::cerr << "this host's default library dirs hold libnvrtc.so.13: not checking loadability\n";
  } else {
    EXPECT_FALSE(s.libnvrtc_loadable());
    EXPECT_FALSE(s.libcudart_loadable());
    EXPECT_EQ(s.libnvrtc_path(), "");
  }
  // The headers the JIT would use are the pip runtime's 13.0 (the compiler/header mismatch shows
  // once nvcc 13.2 is installed: the next test).
  EXPECT_EQ(s.include_dir(), cuda + "/include");
  EXPECT_EQ(s.cudart_header_path(), cuda + "/include/cuda_runtime_api.h");
  EXPECT_EQ(s.cudart_header_version(), "13.0");
  EXPECT_EQ(s.nvvm_dir(), cuda + "/nvvm");
  EXPECT_EQ(s.nvvm_version(), "13.0");
  // The pip cu13 layout without lib64, unversioned libcudart.so or a libcuda stub.
  EXPECT_EQ(s.pip_cuda_dir(), cuda);
  EXPECT_EQ(s.cuda_root(), cuda);
  EXPECT_EQ(s.cuda_root_source(), "pip");
  EXPECT_FALSE(s.cuda_lib64_present());
  EXPECT_EQ(s.libcuda_stub(), "");
  EXPECT_EQ(s.libcudart_unversioned(), "");
  // pip packages from dist-info.
  EXPECT_EQ(s.venv(), world.Path("venv"));
  EXPECT_EQ(s.site_packages(), world.Path("venv/lib/python3.12/site-packages"));
  EXPECT_THAT(Packages(s),
              UnorderedElementsAre(
                  Pair("flashinfer-python", "0.5.3"), Pair("nvidia-cuda-crt", "13.0.88"),
                  Pair("nvidia-cuda-cupti", "13.0.85"), Pair("nvidia-cuda-nvrtc", "13.0.88"),
                  Pair("nvidia-cuda-runtime", "13.0.96"), Pair("nvidia-nvvm", "13.0.88"),
                  Pair("sgl-kernel", "0.3.18"), Pair("sglang", "0.5.6"), Pair("torch", "2.9.1"),
                  Pair("vllm", "0.11.0")));
  // 8 GPUs of compute capability 12.0; a driver that supports CUDA 13.2.
  ASSERT_EQ(s.gpus_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(s.gpus(i).index(), i);
    EXPECT_EQ(s.gpus(i).name(), "NVIDIA RTX PRO 6000 Blackwell Server Edition");
    EXPECT_EQ(s.gpus(i).compute_capability(), "12.0");
  }
  EXPECT_EQ(s.driver_version(), "595.45.04");
  EXPECT_EQ(s.driver_cuda_version(), "13.2");
  EXPECT_THAT(s.jit_cache_dirs(), IsEmpty());
  // Each missing fact says why.
  EXPECT_THAT(s.notes(), Contains(HasSubstr("no nvcc is on the server's PATH")));
  EXPECT_THAT(s.notes(), Contains(HasSubstr("ninja: not on the server's PATH")));
}

TEST_F(SimWorldProbe, SeedWorldShowsTheHeaderMismatchOnceNvccIsInstalled) {
  absl::StatusOr<SimWorld> made_world = Make("seed");
  ASSERT_TRUE(made_world.ok()) << made_world.status();
  const SimWorld& world = *made_world;
  auto pip = world.Pip({"install", "-q", "nvidia-cuda-nvcc"});
  ASSERT_TRUE(pip.ok()) << pip.status();
  ASSERT_EQ(pip->exit_code, 0) << pip->output;
  ProbeTarget target = Target(world);

  // Installed is not found: the pip nvcc is on neither CUDA_HOME nor the server's PATH.
  ToolchainSnapshot s = Probe(target);
  EXPECT_EQ(s.nvcc().path(), "");
  EXPECT_EQ(Packages(s)["nvidia-cuda-nvcc"], "13.2.78");

  // With CUDA_HOME at the pip root: compiler 13.2, headers 13.0.
  target.env["CUDA_HOME"] = world.CudaDir();
  s = Probe(target);
  SCOPED_TRACE(s.DebugString());
  EXPECT_EQ(s.nvcc().path(), world.CudaDir() + "/bin/nvcc");
  EXPECT_EQ(s.nvcc().version(), "13.2");
  EXPECT_EQ(s.cudart_header_version(), "13.0");
  EXPECT_EQ(s.ptxas().version(), "13.2");
  EXPECT_EQ(s.ptx_isa_max(), "9.2");
  EXPECT_EQ(s.ptx_isa_source(), "ptxas");
  EXPECT_EQ(s.nvvm_version(), "13.0");
}

TEST_F(SimWorldProbe, FixedWorldHasEveryFactRight) {
  absl::StatusOr<SimWorld> made_world = Make("fixed");
  ASSERT_TRUE(made_world.ok()) << made_world.status();
  const SimWorld& world = *made_world;
  const ToolchainSnapshot s = Probe(Target(world));
  const std::string cuda = world.CudaDir();
  SCOPED_TRACE(s.DebugString());

  EXPECT_EQ(s.cuda_home(), cuda);
  EXPECT_EQ(s.cuda_root_source(), "CUDA_HOME");
  EXPECT_EQ(s.nvcc().path(), cuda + "/bin/nvcc");
  EXPECT_EQ(s.nvcc().version(), "13.2");
  EXPECT_EQ(s.ptxas().path(), cuda + "/bin/ptxas");
  EXPECT_EQ(s.ptxas().version(), "13.2");
  EXPECT_EQ(s.ptx_isa_max(), "9.2");  // ran the fake ptxas on the probe PTX
  EXPECT_EQ(s.ptx_isa_source(), "ptxas");
  EXPECT_EQ(s.cudart_header_version(), "13.2");
  EXPECT_EQ(s.nvvm_version(), "13.2");
  EXPECT_EQ(s.ninja().path(), world.Path("bin/ninja"));
  EXPECT_THAT(s.ninja().version(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+.*"));
  EXPECT_TRUE(s.cuda_lib64_present());
  EXPECT_EQ(s.libcuda_stub(), cuda + "/lib64/stubs/libcuda.so");
  EXPECT_EQ(s.libcudart_unversioned(), cuda + "/lib64/libcudart.so");
  EXPECT_TRUE(s.libnvrtc_loadable());
  EXPECT_EQ(s.libnvrtc_path(), cuda + "/lib/libnvrtc.so.13");
  EXPECT_TRUE(s.libcudart_loadable());
  EXPECT_EQ(s.libcudart_path(), cuda + "/lib/libcudart.so.13");
  auto packages = Packages(s);
  for (const char* p : {"nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc",
                        "nvidia-cuda-cupti", "nvidia-cuda-crt", "nvidia-nvvm"}) {
    EXPECT_THAT(packages[p], ::testing::StartsWith("13.2.")) << p;
  }
  EXPECT_EQ(s.gpus_size(), 8);
  EXPECT_EQ(s.driver_cuda_version(), "13.2");
  // The world's device nodes (when made as root) are all there.
  EXPECT_EQ(s.device_nodes_checked(), !world.DevRoot().empty());
  EXPECT_THAT(s.device_node_problems(), IsEmpty());
  EXPECT_THAT(s.notes(), IsEmpty());
}

// Collects the top-level fields in which two snapshots differ.
class FieldCollector : public google::protobuf::util::MessageDifferencer::Reporter {
 public:
  using SpecificField = google::protobuf::util::MessageDifferencer::SpecificField;
  void ReportAdded(const google::protobuf::Message&, const google::protobuf::Message&,
                   const std::vector<SpecificField>& path) override {
    fields.insert(path[0].field->name());
  }
  void ReportDeleted(const google::protobuf::Message&, const google::protobuf::Message&,
                     const std::vector<SpecificField>& path) override {
    fields.insert(path[0].field->name());
  }
  void ReportModified(const google::protobuf::Message&, const google::protobuf::Message&,
                      const std::vector<SpecificField>& path) override {
    fields.insert(path[0].field->name());
  }
  std::set<std::string> fields;
};

// `s` with its world's root replaced by WORLD, so two worlds' snapshots compare.
ToolchainSnapshot Normalized(const ToolchainSnapshot& s, const SimWorld& world) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(s, &text);
  text = absl::StrReplaceAll(text, {{world.root(), "WORLD"}});
  ToolchainSnapshot out;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &out));
  return out;
}

std::set<std::string> DifferingFields(const ToolchainSnapshot& a, const ToolchainSnapshot& b) {
  FieldCollector collector;
  google::protobuf::util::MessageDifferencer differencer;
  const auto* d = ToolchainSnapshot::descriptor();
  differencer.IgnoreField(d->FindFieldByName("at"));
  differencer.IgnoreField(d->FindFieldByName("notes"));
  differencer.ReportDifferencesTo(&collector);
  differencer.Compare(a, b);
  return collector.fields;
}

TEST_F(SimWorldProbe, EachBrokenWorldDiffersFromTheFixedOneInItsFactOnly) {
  absl::StatusOr<SimWorld> made_fixed = Make("fixed");
  ASSERT_TRUE(made_fixed.ok()) << made_fixed.status();
  const SimWorld& fixed = *made_fixed;
  const ToolchainSnapshot base = Normalized(Probe(Target(fixed)), fixed);
  const std::map<std::string, std::set<std::string>> expected = {
      {"loader_path",
       {"libnvrtc_loadable", "libcudart_loadable", "libnvrtc_path", "libcudart_path"}},
      // The nvcc package brings ptxas too.
      {"nvcc", {"nvcc", "ptxas", "ptx_isa_max", "ptx_isa_source", "pip_packages"}},
      {"ninja", {"ninja"}},
      {"headers", {"cudart_header_version", "pip_packages"}},
      // Everything at 13.0: compiler and headers agree, ptxas accepts 9.0 at most.
      {"ptxas",
       {"nvcc", "ptxas", "ptx_isa_max", "cudart_header_version", "nvvm_version", "pip_packages"}},
      {"link_stub", {"cuda_lib64_present", "libcuda_stub", "libcudart_unversioned"}},
  };
  for (const auto& [problem, fields] : expected) {
    SCOPED_TRACE(problem);
    absl::StatusOr<SimWorld> made_world = Make("fixed", {problem});
    ASSERT_TRUE(made_world.ok()) << made_world.status();
    const SimWorld& world = *made_world;
    const ToolchainSnapshot s = Normalized(Probe(Target(world)), world);
    EXPECT_EQ(DifferingFields(base, s), fields) << s.DebugString();
    if (problem == "loader_path") {
      if (!HostDefaultDirsHold("libnvrtc.so.13")) {
        EXPECT_FALSE(s.libnvrtc_loadable());
      }
    } else if (problem == "nvcc") {
      EXPECT_EQ(s.nvcc().path(), "");
      EXPECT_EQ(s.ptx_isa_max(), "");
      EXPECT_EQ(Packages(s).count("nvidia-cuda-nvcc"), 0u);
    } else if (problem == "ninja") {
      EXPECT_EQ(s.ninja().path(), "");
    } else if (problem == "headers") {
      EXPECT_EQ(s.nvcc().version(), "13.2");
      EXPECT_EQ(s.cudart_header_version(), "13.0");
    } else if (problem == "ptxas") {
      EXPECT_EQ(s.ptxas().version(), "13.0");
      EXPECT_EQ(s.ptx_isa_max(), "9.0");
      EXPECT_EQ(s.ptx_isa_source(), "ptxas");
      EXPECT_EQ(s.cudart_header_version(), "13.0");
    } else if (problem == "link_stub") {
      EXPECT_FALSE(s.cuda_lib64_present());
      EXPECT_EQ(s.libcuda_stub(), "");
      EXPECT_EQ(s.libcudart_unversioned(), "");
    }
  }
}

TEST_F(SimWorldProbe, FindsTheJitCacheInTheServersHome) {
  absl::StatusOr<SimWorld> made_world = Make("fixed");
  ASSERT_TRUE(made_world.ok()) << made_world.status();
  const SimWorld& world = *made_world;
  const std::string cache = world.Path("root/.cache/flashinfer");
  ASSERT_EQ(mkdir(world.Path("root/.cache").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(cache.c_str(), 0755), 0);
  EXPECT_THAT(Probe(Target(world)).jit_cache_dirs(), ElementsAre(cache));
}

// ---------------------------------------------------------------------------------------------
// This machine's real CUDA toolkit.

constexpr char kRealCuda[] = "/usr/local/cuda";

bool HaveRealCuda() { return access(absl::StrCat(kRealCuda, "/bin/nvcc").c_str(), X_OK) == 0; }

TEST(ToolchainProbeRealCuda, ReadsTheRealCuda13Toolkit) {
  if (!HaveRealCuda()) GTEST_SKIP() << "no CUDA toolkit at " << kRealCuda << " on this machine";
  TempDir home;
  ProbeTarget target;
  target.env = {{"PATH", absl::StrCat(kRealCuda, "/bin:/usr/sbin:/usr/bin:/sbin:/bin")},
                {"CUDA_HOME", kRealCuda},
                {"HOME", home.path()}};
  PosixCommandRunner runner(1 << 20);
  const ToolchainSnapshot s = ToolchainProbe(&runner).Probe(target);
  std::cout << "real CUDA probe:\n" << s.DebugString();
  EXPECT_EQ(s.nvcc().path(), absl::StrCat(kRealCuda, "/bin/nvcc"));
  EXPECT_EQ(s.nvcc().version(), "13.0");
  EXPECT_EQ(s.ptxas().path(), absl::StrCat(kRealCuda, "/bin/ptxas"));
  EXPECT_EQ(s.ptxas().version(), "13.0");
  // Found by running the real ptxas on the probe PTX, not from the table.
  EXPECT_EQ(s.ptx_isa_max(), "9.0");
  EXPECT_EQ(s.ptx_isa_source(), "ptxas");
  EXPECT_EQ(s.cudart_header_path(), absl::StrCat(kRealCuda, "/include/cuda_runtime_api.h"));
  EXPECT_EQ(s.cudart_header_version(), "13.0");
  EXPECT_EQ(s.cuda_root_source(), "CUDA_HOME");
  // The loader's view: what this machine's ld.so.cache says, read through `ldconfig -p`.
  auto ldconfig =
      fleet::testing::Run({"/usr/sbin/ldconfig", "-p"}, {.output_path = home.Join("ldconfig.out")});
  if (ldconfig.ok() && absl::StrContains(ldconfig->output, "libnvrtc.so.13 (libc6,x86-64)")) {
    EXPECT_TRUE(s.libnvrtc_loadable());
  }
}

TEST(ToolchainProbeRealCuda, FindsNvccOnThePathWithoutCudaHome) {
  if (!HaveRealCuda()) GTEST_SKIP() << "no CUDA toolkit at " << kRealCuda << " on this machine";
  ProbeTarget target;
  target.env = {{"PATH", absl::StrCat(kRealCuda, "/bin:/usr/bin:/bin")}};
  PosixCommandRunner runner(1 << 20);
  const ToolchainSnapshot s = ToolchainProbe(&runner).Probe(target);
  EXPECT_EQ(s.cuda_home(), "");
  EXPECT_EQ(s.cuda_root(), kRealCuda);
  EXPECT_EQ(s.cuda_root_source(), "nvcc");
  EXPECT_EQ(s.nvcc().version(), "13.0");
  EXPECT_EQ(s.include_dir(), absl::StrCat(kRealCuda, "/include"));
  EXPECT_EQ(s.cudart_header_version(), "13.0");
  EXPECT_EQ(s.ptx_isa_max(), "9.0");
}

// ---------------------------------------------------------------------------------------------
// Edge cases through a fake runner: what the tools say is scripted, the files are real.

CommandResult Exited(int code, std::string output) {
  CommandResult r;
  r.exited = true;
  r.exit_code = code;
  r.output_bytes = static_cast<int64_t>(output.size());
  r.output = std::move(output);
  return r;
}

std::string Banner(const std::string& tool, const std::string& release) {
  return absl::StrCat(tool, ": NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release ",
                      release, ", V", release, ".88\nBuild cuda_", release, "\n");
}

std::string PtxasRejects(const std::string& file, const std::string& current) {
  return absl::StrCat("ptxas ", file, ", line 1; fatal   : Unsupported .version 99.9; current ",
                      "version is '", current,
                      "'\nptxas fatal   : Ptx assembly aborted due to errors\n");
}

std::string Base(const std::string& path) { return path.substr(path.rfind('/') + 1); }

class FakeRunner : public CommandRunner {
 public:
  using Handler = std::function<absl::StatusOr<CommandResult>(const Command&)>;
  // `handler` answers every command; the default answers NotFound, as for a missing tool.
  void Answer(Handler handler) { handler_ = std::move(handler); }

  absl::StatusOr<CommandResult> Run(const Command& command) override {
    calls.push_back(command);
    if (handler_) return handler_(command);
    return absl::NotFoundError(absl::StrCat(command.argv[0], ": not found"));
  }

  std::vector<Command> calls;

 private:
  Handler handler_;
};

// A tree of fake tools and files in a temp dir.
class FakeTree : public ::testing::Test {
 protected:
  void Tool(const std::string& relative) {
    tmp_.WriteFile(relative, "#!/bin/false\n");
    ASSERT_EQ(chmod(tmp_.Join(relative).c_str(), 0755), 0);
  }
  void File(const std::string& relative, const std::string& contents = "") {
    tmp_.WriteFile(relative, contents);
  }
  ToolchainSnapshot Probe() { return ToolchainProbe(&runner_).Probe(target_); }

  // A toolkit at tmp/cuda: nvcc and ptxas of `release`, ptxas answering the probe with `isa`.
  void Toolkit(const std::string& release, const std::string& isa) {
    Tool("cuda/bin/nvcc");
    Tool("cuda/bin/ptxas");
    File("cuda/include/cuda_runtime_api.h",
         absl::StrCat("#define CUDART_VERSION ", release.substr(0, release.find('.')), "0",
                      release.substr(release.find('.') + 1), "0\n"));
    target_.env["CUDA_HOME"] = tmp_.Join("cuda");
    runner_.Answer([release, isa](const Command& c) -> absl::StatusOr<CommandResult> {
      const std::string tool = Base(c.argv[0]);
      if ((tool == "nvcc" || tool == "ptxas") && c.argv.size() == 2 && c.argv[1] == "--version") {
        return Exited(0, Banner(tool, release));
      }
      if (tool == "ptxas") return Exited(255, PtxasRejects(c.argv[1], isa));
      return absl::NotFoundError(absl::StrCat(c.argv[0], ": not found"));
    });
  }

  TempDir tmp_;
  FakeRunner runner_;
  ProbeTarget target_{.env = {{"PATH", "/nonexistent"}}};
};

TEST_F(FakeTree, RunsEveryToolFromArgvWithTheServersEnvNeverAShell) {
  Toolkit("13.0", "9.0");
  target_.env["SECRET_SHAPE"] = "kept";
  Probe();
  ASSERT_FALSE(runner_.calls.empty());
  for (const Command& c : runner_.calls) {
    EXPECT_NE(Base(c.argv[0]), "sh");
    EXPECT_NE(Base(c.argv[0]), "bash");
    EXPECT_EQ(c.env, target_.env);
    EXPECT_GT(c.timeout, absl::ZeroDuration());
  }
}

TEST_F(FakeTree, NvccVersionGarbageIsAFact) {
  Toolkit("13.0", "9.0");
  runner_.Answer([](const Command& c) -> absl::StatusOr<CommandResult> {
    if (Base(c.argv[0]) == "nvcc")
      return Exited(0,
                    "\x7f"
                    "ELF garbage\n");
    if (Base(c.argv[0]) == "ptxas" && c.argv[1] == "--version") {
      return Exited(0, Banner("ptxas", "13.0"));
    }
    if (Base(c.argv[0]) == "ptxas") return Exited(255, PtxasRejects(c.argv[1], "9.0"));
    return absl::NotFoundError("not found");
  });
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.nvcc().path(), tmp_.Join("cuda/bin/nvcc"));
  EXPECT_EQ(s.nvcc().version(), "");
  EXPECT_EQ(s.ptxas().version(), "13.0");
  EXPECT_EQ(s.ptx_isa_max(), "9.0");
  EXPECT_THAT(s.notes(), Contains(HasSubstr("nvcc --version: exit 0, no 'release X.Y'")));
}

TEST_F(FakeTree, PtxasMissingLeavesTheIsaUnknown) {
  Toolkit("13.0", "9.0");
  ASSERT_EQ(unlink(tmp_.Join("cuda/bin/ptxas").c_str()), 0);
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.nvcc().version(), "13.0");
  EXPECT_EQ(s.ptxas().path(), "");
  EXPECT_EQ(s.ptx_isa_max(), "");
  EXPECT_EQ(s.ptx_isa_source(), "");
  EXPECT_THAT(s.notes(), Contains(HasSubstr("ptxas: none next to nvcc")));
}

TEST_F(FakeTree, PtxasNextToNvccWinsOverThePath) {
  Toolkit("13.2", "9.2");
  Tool("other/bin/ptxas");
  target_.env["PATH"] = tmp_.Join("other/bin");
  EXPECT_EQ(Probe().ptxas().path(), tmp_.Join("cuda/bin/ptxas"));
  // Without one next to nvcc, the PATH's.
  ASSERT_EQ(unlink(tmp_.Join("cuda/bin/ptxas").c_str()), 0);
  EXPECT_EQ(Probe().ptxas().path(), tmp_.Join("other/bin/ptxas"));
}

TEST_F(FakeTree, PtxIsaComesFromRunningPtxasOnARealProbeFile) {
  Toolkit("13.1", "9.1");
  std::string probe_file, probe_text;
  runner_.Answer([&](const Command& c) -> absl::StatusOr<CommandResult> {
    if (Base(c.argv[0]) != "ptxas") return absl::NotFoundError("not found");
    if (c.argv[1] == "--version") return Exited(0, Banner("ptxas", "13.1"));
    probe_file = c.argv[1];
    probe_text = fleet::testing::ReadFile(probe_file);
    return Exited(255, PtxasRejects(c.argv[1], "9.1"));
  });
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.ptx_isa_max(), "9.1");
  EXPECT_EQ(s.ptx_isa_source(), "ptxas");
  EXPECT_THAT(probe_text, HasSubstr(".version 99.9\n"));
  // The probe's temp dir is gone.
  ASSERT_FALSE(probe_file.empty());
  EXPECT_FALSE(Exists(probe_file.substr(0, probe_file.rfind('/'))));
}

TEST_F(FakeTree, PtxasThatDoesNotSayFallsBackToTheReleaseTable) {
  Toolkit("12.8", "unused");
  runner_.Answer([](const Command& c) -> absl::StatusOr<CommandResult> {
    if (c.argv[1] == "--version") return Exited(0, Banner(Base(c.argv[0]), "12.8"));
    return Exited(255, "ptxas fatal   : Memory allocation failure\n");
  });
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.ptxas().version(), "12.8");
  EXPECT_EQ(s.ptx_isa_max(), "8.7");
  EXPECT_EQ(s.ptx_isa_source(), "release_table");
  EXPECT_THAT(s.notes(), Contains(HasSubstr("Memory allocation failure")));
}

TEST_F(FakeTree, NvidiaSmiFailingIsAFact) {
  runner_.Answer([](const Command& c) -> absl::StatusOr<CommandResult> {
    if (Base(c.argv[0]) == "nvidia-smi") {
      return Exited(9,
                    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                    "driver. Make sure that the latest NVIDIA driver is installed and running.\n");
    }
    return absl::NotFoundError("not found");
  });
  ToolchainSnapshot s = Probe();
  EXPECT_THAT(s.gpus(), IsEmpty());
  EXPECT_EQ(s.driver_version(), "");
  EXPECT_EQ(s.driver_cuda_version(), "");
  EXPECT_THAT(s.notes(), Contains(HasSubstr("nvidia-smi: exit 9: NVIDIA-SMI has failed")));

  // Absent, or hung until the runner's timeout: the same.
  runner_.Answer(nullptr);
  s = Probe();
  EXPECT_THAT(s.gpus(), IsEmpty());
  EXPECT_THAT(s.notes(), Contains(HasSubstr("nvidia-smi: not found")));
  runner_.Answer([](const Command&) -> absl::StatusOr<CommandResult> {
    CommandResult r;
    r.timed_out = true;
    r.signal = 9;
    return r;
  });
  s = Probe();
  EXPECT_THAT(s.gpus(), IsEmpty());
  EXPECT_THAT(s.notes(), Contains(HasSubstr("nvidia-smi: timed out")));
}

TEST_F(FakeTree, ParsesRealNvidiaSmiOutputFromTheConfiguredCommand) {
  // Captured from an H200 machine (driver 580.159.04).
  const std::string banner =
      "Sun Nov 29 19:18:55 2026       \n"
      "+-----------------------------------------------------------------------------------------+"
      "\n"
      "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     "
      "|\n"
      "+-----------------------------------------+------------------------+----------------------+"
      "\n"
      "|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 "
      "|\n";
  target_.nvidia_smi = {"/opt/container/bin/nvidia-smi"};
  runner_.Answer([&](const Command& c) -> absl::StatusOr<CommandResult> {
    if (c.argv[0] != "/opt/container/bin/nvidia-smi") return absl::NotFoundError("not found");
    if (c.argv.size() == 1) return Exited(0, banner);
    EXPECT_THAT(c.argv, ElementsAre(c.argv[0], "--query-gpu=index,name,compute_cap,driver_version",
                                    "--format=csv,noheader"));
    return Exited(0, "0, NVIDIA H200, 9.0, 580.159.04\n1, Odd, Name, 12.0, 580.159.04\n");
  });
  const ToolchainSnapshot s = Probe();
  ASSERT_EQ(s.gpus_size(), 2);
  EXPECT_EQ(s.gpus(0).name(), "NVIDIA H200");
  EXPECT_EQ(s.gpus(0).compute_capability(), "9.0");
  EXPECT_EQ(s.gpus(1).index(), 1);
  EXPECT_EQ(s.gpus(1).name(), "Odd, Name");
  EXPECT_EQ(s.gpus(1).compute_capability(), "12.0");
  EXPECT_EQ(s.driver_version(), "580.159.04");
  EXPECT_EQ(s.driver_cuda_version(), "13.0");
}

TEST_F(FakeTree, CudaHomeWithAColonIsRecordedAsGiven) {
  Toolkit("13.0", "9.0");
  // A nvcc on PATH does not help: flashinfer takes CUDA_HOME as it is.
  Tool("path/bin/nvcc");
  target_.env["PATH"] = tmp_.Join("path/bin");
  const std::string bad = absl::StrCat(tmp_.Join("cuda"), ":", tmp_.Join("path"));
  target_.env["CUDA_HOME"] = bad;
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.cuda_home(), bad);
  EXPECT_EQ(s.cuda_root(), bad);
  EXPECT_EQ(s.nvcc().path(), "");
  EXPECT_EQ(s.cudart_header_version(), "");
  EXPECT_FALSE(s.cuda_lib64_present());
  EXPECT_THAT(s.notes(), Contains(HasSubstr("contains ':'")));
}

TEST_F(FakeTree, CudaHomeThatIsNoDirectoryIsAFact) {
  target_.env["CUDA_HOME"] = tmp_.Join("gone");
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.cuda_home(), tmp_.Join("gone"));
  EXPECT_EQ(s.nvcc().path(), "");
  EXPECT_THAT(s.notes(), Contains(HasSubstr("is not a directory")));
}

TEST_F(FakeTree, TheSearchPathShowsNinjaAndToolkitsOffTheServersPath) {
  Toolkit("12.4", "8.4");  // CUDA_HOME's toolkit, at tmp/cuda
  target_.env["CUDA_HOME"] = tmp_.Join("gone");
  Tool("opt/bin/ninja");
  Tool("other/cuda-12.4/bin/nvcc");
  Tool("other/cuda-12.4/bin/ptxas");
  // Nothing is searched unless the config says where.
  ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.ninja_elsewhere(), "");
  EXPECT_TRUE(s.toolkits_elsewhere().empty());
  // A dir with nvcc is a toolkit's bin/, a dir with bin/nvcc its root.
  target_.search_path = {tmp_.Join("opt/bin"), tmp_.Join("cuda/bin"), tmp_.Join("other/cuda-12.4"),
                         tmp_.Join("missing")};
  s = Probe();
  EXPECT_EQ(s.ninja().path(), "");
  EXPECT_EQ(s.ninja_elsewhere(), tmp_.Join("opt/bin/ninja"));
  ASSERT_EQ(s.toolkits_elsewhere_size(), 2);
  EXPECT_EQ(s.toolkits_elsewhere(0).path(), tmp_.Join("cuda"));
  EXPECT_EQ(s.toolkits_elsewhere(0).version(), "12.4");
  EXPECT_EQ(s.toolkits_elsewhere(1).path(), tmp_.Join("other/cuda-12.4"));
  // A ninja the server finds itself is no "elsewhere".
  Tool("path/ninja");
  target_.env["PATH"] = tmp_.Join("path");
  EXPECT_EQ(Probe().ninja_elsewhere(), "");
}

TEST_F(FakeTree, RunnerFailuresAreFactsNotErrors) {
  Toolkit("13.0", "9.0");
  Tool("bin/ninja");
  target_.env["PATH"] = tmp_.Join("bin");
  runner_.Answer([](const Command&) -> absl::StatusOr<CommandResult> {
    return absl::UnavailableError("posix_spawn: Resource temporarily unavailable");
  });
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.nvcc().path(), tmp_.Join("cuda/bin/nvcc"));
  EXPECT_EQ(s.nvcc().version(), "");
  EXPECT_EQ(s.ptx_isa_max(), "");
  EXPECT_EQ(s.ninja().path(), tmp_.Join("bin/ninja"));
  EXPECT_EQ(s.ninja().version(), "");
  EXPECT_EQ(s.cudart_header_version(), "13.0");  // files need no tool
  EXPECT_THAT(s.notes(), Contains(HasSubstr("Resource temporarily unavailable")));
}

TEST_F(FakeTree, FindsTheVenvFromArgvThenVirtualEnvAndReadsDistInfo) {
  Tool("venv/bin/python");
  File("venv/pyvenv.cfg", "home = /usr/bin\n");
  const std::string site = "venv/lib/python3.12/site-packages";
  File(site + "/Nvidia_Cuda_Runtime-13.0.96.dist-info/METADATA",
       "Metadata-Version: 2.1\nName: nvidia_cuda_runtime\nVersion: 13.0.96\n\nVersion: 1.0\n");
  File(site + "/torch-2.9.1+cu130.dist-info/METADATA", "Name: torch\nVersion: 2.9.1+cu130\n");
  File(site + "/requests-2.32.0.dist-info/METADATA", "Name: requests\nVersion: 2.32.0\n");
  File(site + "/broken-1.0.dist-info/METADATA", "Summary: no name\n");
  File(site + "/nvidia/cu13/include/cuda_runtime_api.h", "#define CUDART_VERSION 13000\n");

  target_.argv = {tmp_.Join("venv/bin/python"), "-m", "sglang.launch_server"};
  ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.venv(), tmp_.Join("venv"));
  EXPECT_EQ(s.site_packages(), tmp_.Join(site));
  EXPECT_THAT(Packages(s), UnorderedElementsAre(Pair("nvidia-cuda-runtime", "13.0.96"),
                                                Pair("torch", "2.9.1+cu130")));
  EXPECT_EQ(s.pip_cuda_dir(), tmp_.Join(site + "/nvidia/cu13"));
  EXPECT_EQ(s.cudart_header_version(), "13.0");

  // A bare `python`, found on the server's PATH; a relative one, against the working dir.
  target_.argv = {"python"};
  target_.env["PATH"] = tmp_.Join("venv/bin");
  EXPECT_EQ(Probe().venv(), tmp_.Join("venv"));
  target_.argv = {"venv/bin/python"};
  target_.workdir = tmp_.path();
  EXPECT_EQ(Probe().venv(), tmp_.Join("venv"));

  // A python outside any venv: VIRTUAL_ENV; a configured venv wins over both.
  target_.argv = {"/usr/bin/python3"};
  target_.env["VIRTUAL_ENV"] = tmp_.Join("venv");
  EXPECT_EQ(Probe().venv(), tmp_.Join("venv"));
  target_.venv = tmp_.Join("elsewhere");
  s = Probe();
  EXPECT_EQ(s.venv(), tmp_.Join("elsewhere"));
  EXPECT_THAT(s.pip_packages(), IsEmpty());
}

TEST_F(FakeTree, LoaderSearchesLdLibraryPathThenTheSystemCache) {
  Toolkit("13.0", "9.0");  // CUDA 13: the sonames are .so.13
  File("ld1/libcudart.so.12");
  File("ld2/libnvrtc.so.13");
  File("sys/libcudart.so.13");
  File("sys32/libnvrtc.so.13");
  target_.env["LD_LIBRARY_PATH"] = absl::StrCat(tmp_.Join("ld1"), "::", tmp_.Join("ld2"));
  const std::string cache =
      absl::StrCat("3 libs found in cache `/etc/ld.so.cache'\n", "\tlibnvrtc.so.13 (libc6) => ",
                   tmp_.Join("sys32/libnvrtc.so.13"), "\n", "\tlibcudart.so.13 (libc6,x86-64) => ",
                   tmp_.Join("sys/libcudart.so.13"), "\n", "\tlibcudart.so.12 (libc6,x86-64) => ",
                   tmp_.Join("ld1/libcudart.so.12"), "\n");
  runner_.Answer([&](const Command& c) -> absl::StatusOr<CommandResult> {
    if (c.argv[0] == "ldconfig") {
      EXPECT_THAT(c.argv, ElementsAre("ldconfig", "-p"));
      return Exited(0, cache);
    }
    if (c.argv[1] == "--version") return Exited(0, Banner(Base(c.argv[0]), "13.0"));
    return Exited(255, PtxasRejects(c.argv[1], "9.0"));
  });
  ToolchainSnapshot s = Probe();
  EXPECT_TRUE(s.libnvrtc_loadable());
  EXPECT_EQ(s.libnvrtc_path(), tmp_.Join("ld2/libnvrtc.so.13"));
  EXPECT_TRUE(s.libcudart_loadable());
  EXPECT_EQ(s.libcudart_path(), tmp_.Join("sys/libcudart.so.13"));

  // Without the cache (no ldconfig on the server's PATH) and off LD_LIBRARY_PATH: not loadable.
  target_.env.erase("LD_LIBRARY_PATH");
  runner_.Answer(nullptr);
  s = Probe();
  if (!HostDefaultDirsHold("libnvrtc.so.13")) {
    EXPECT_FALSE(s.libnvrtc_loadable());
    EXPECT_THAT(s.notes(), Contains(HasSubstr("libnvrtc.so.13: not on LD_LIBRARY_PATH")));
  }
}

TEST_F(FakeTree, LinkLayoutOfTheToolkitRoot) {
  Toolkit("13.0", "9.0");
  File("cuda/lib/libcudart.so");
  File("cuda/lib/stubs/libcuda.so");
  ToolchainSnapshot s = Probe();
  EXPECT_FALSE(s.cuda_lib64_present());
  EXPECT_EQ(s.libcuda_stub(), tmp_.Join("cuda/lib/stubs/libcuda.so"));
  EXPECT_EQ(s.libcudart_unversioned(), tmp_.Join("cuda/lib/libcudart.so"));
  ASSERT_EQ(symlink("lib", tmp_.Join("cuda/lib64").c_str()), 0);
  s = Probe();
  EXPECT_TRUE(s.cuda_lib64_present());
  EXPECT_EQ(s.libcuda_stub(), tmp_.Join("cuda/lib64/stubs/libcuda.so"));
  EXPECT_EQ(s.libcudart_unversioned(), tmp_.Join("cuda/lib64/libcudart.so"));
  // A dangling stub link is no stub.
  ASSERT_EQ(unlink(tmp_.Join("cuda/lib/stubs/libcuda.so").c_str()), 0);
  ASSERT_EQ(symlink(tmp_.Join("nowhere").c_str(), tmp_.Join("cuda/lib/stubs/libcuda.so").c_str()),
            0);
  EXPECT_EQ(Probe().libcuda_stub(), "");
}

TEST_F(FakeTree, JitCacheDirsFollowTheServersEnv) {
  File("home/.cache/flashinfer/0.5.3/120/cached_ops/x.so");
  File("home/.cache/torch_extensions/py312/x.so");
  File("te/x");
  target_.env["HOME"] = tmp_.Join("home");
  EXPECT_THAT(Probe().jit_cache_dirs(), ElementsAre(tmp_.Join("home/.cache/flashinfer"),
                                                    tmp_.Join("home/.cache/torch_extensions")));
  target_.env["TORCH_EXTENSIONS_DIR"] = tmp_.Join("te");
  target_.env["FLASHINFER_JIT_DIR"] = tmp_.Join("absent");
  EXPECT_THAT(Probe().jit_cache_dirs(), ElementsAre(tmp_.Join("te")));
  target_.jit_cache_roots = {tmp_.Join("home/.cache/flashinfer"), tmp_.Join("absent")};
  EXPECT_THAT(Probe().jit_cache_dirs(), ElementsAre(tmp_.Join("home/.cache/flashinfer")));
}

TEST_F(FakeTree, NvvmReleaseFromItsPipPackage) {
  // nvidia-nvvm is a package of its own: its release can differ from nvcc's.
  const std::string site = "venv/lib/python3.12/site-packages";
  Tool("venv/bin/python");
  File("venv/pyvenv.cfg");
  File(site + "/nvidia_nvvm-13.2.78.dist-info/METADATA", "Name: nvidia-nvvm\nVersion: 13.2.78\n");
  File(site + "/nvidia/cu13/nvvm/bin/cicc");
  File(site + "/nvidia/cu13/include/cuda_runtime_api.h", "#define CUDART_VERSION 13000\n");
  target_.argv = {tmp_.Join("venv/bin/python")};
  const ToolchainSnapshot s = Probe();
  EXPECT_EQ(s.cuda_root_source(), "pip");
  EXPECT_EQ(s.nvvm_dir(), tmp_.Join(site + "/nvidia/cu13/nvvm"));
  EXPECT_EQ(s.nvvm_version(), "13.2");
}

// ---------------------------------------------------------------------------------------------
// The GPU device nodes, in a dev dir of the test's own: real character devices made with mknod
// (root only, as in a container's /dev), files and dirs where a node should be, none at all.

class DeviceNodes : public FakeTree {
 protected:
  void SetUp() override {
    target_.gpus = {0};
    target_.dev_root = tmp_.Join("dev");
    ASSERT_EQ(mkdir(dev().c_str(), 0755), 0);
  }
  std::string dev() const { return tmp_.Join("dev"); }
  std::string Dev(const std::string& name) const { return absl::StrCat(dev(), "/", name); }
  // The node `name` as the character device major:minor; false (and the test skipped) when this
  // process may not make one.
  bool Node(const std::string& name, unsigned major_number, unsigned minor_number) {
    if (geteuid() != 0) return false;
    return mknod(Dev(name).c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)) == 0;
  }
  // What an LXC config passes in for GPU 0: nvidia0 (195:0), nvidiactl (195:255), nvidia-uvm.
  bool GoodNodes() {
    return Node("nvidia0", 195, 0) && Node("nvidiactl", 195, 255) && Node("nvidia-uvm", 235, 0);
  }
  static std::vector<std::string> DeviceNotes(const ToolchainSnapshot& s) {
    std::vector<std::string> out;
    for (const std::string& n : s.notes()) {
      if (absl::StrContains(n, "/dev/")) out.push_back(n);
    }
    return out;
  }
};

#define SKIP_WITHOUT_MKNOD(made) \
  if (!(made)) GTEST_SKIP() << "mknod of a character device needs root (tests run as root)"

TEST_F(DeviceNodes, CharacterDevicesOfTheServersGpuPass) {
  SKIP_WITHOUT_MKNOD(GoodNodes());
  const ToolchainSnapshot s = Probe();
  SCOPED_TRACE(s.DebugString());
  EXPECT_TRUE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(), IsEmpty());
  EXPECT_THAT(DeviceNotes(s), IsEmpty());
}

TEST_F(DeviceNodes, NoNodeAtAllIsSaidPlainlyNamingEachPath) {
  // GPUs 0 and 2; CUDA_VISIBLE_DEVICES in the server's env adds none (the agent pins it to the
  // server's GPUs).
  target_.gpus = {2, 0};
  target_.env["CUDA_VISIBLE_DEVICES"] = "5";
  const ToolchainSnapshot s = Probe();
  EXPECT_TRUE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(),
              ElementsAre(Dev("nvidia0") + ": missing", Dev("nvidia2") + ": missing",
                          Dev("nvidiactl") + ": missing", Dev("nvidia-uvm") + ": missing"));
  EXPECT_THAT(s.notes(), Contains(absl::StrCat(
                             "no GPU device node in this container: ", Dev("nvidia0"), ", ",
                             Dev("nvidia2"), ", ", Dev("nvidiactl"), " and ", Dev("nvidia-uvm"),
                             " are missing (the container's config must pass them in: "
                             "docs/config.md, GPUs in a Proxmox LXC container)")));
}

TEST_F(DeviceNodes, AMissingGpuNodeIsNamed) {
  SKIP_WITHOUT_MKNOD(Node("nvidiactl", 195, 255) && Node("nvidia-uvm", 235, 0) &&
                     Node("nvidia1", 195, 1));
  // The server is given GPU 0; the container was given GPU 1 only.
  const ToolchainSnapshot s = Probe();
  EXPECT_THAT(s.device_node_problems(), ElementsAre(Dev("nvidia0") + ": missing"));
  EXPECT_THAT(s.notes(), Contains(AllOf(HasSubstr("GPU device nodes missing in this container: " +
                                                  Dev("nvidia0") + " is missing"),
                                        HasSubstr("docs/config.md"))));
}

TEST_F(DeviceNodes, APlainFileOrADirectoryWhereANodeShouldBeIsReported) {
  // A bind mount of the wrong source: a file, a directory.
  File("dev/nvidia0", "");
  ASSERT_EQ(mkdir(Dev("nvidia-uvm").c_str(), 0755), 0);
  const ToolchainSnapshot s = Probe();
  EXPECT_THAT(s.device_node_problems(),
              Contains(Dev("nvidia0") + ": a regular file, not a character device"));
  EXPECT_THAT(s.device_node_problems(),
              Contains(Dev("nvidia-uvm") + ": a directory, not a character device"));
  EXPECT_THAT(s.notes(),
              Contains(HasSubstr(Dev("nvidia0") + " is a regular file, not a character device")));
  // Only nvidiactl is missing: some nodes are there, so it is not "no GPU device node".
  EXPECT_THAT(s.notes(), Contains(HasSubstr("GPU device nodes missing in this container: " +
                                            Dev("nvidiactl") + " is missing")));
}

TEST_F(DeviceNodes, ANodeOfAnotherDeviceIsReported) {
  // nvidia0 bound to the second GPU's node.
  SKIP_WITHOUT_MKNOD(Node("nvidia0", 195, 1) && Node("nvidiactl", 195, 255) &&
                     Node("nvidia-uvm", 235, 0));
  const ToolchainSnapshot s = Probe();
  EXPECT_THAT(s.device_node_problems(),
              ElementsAre(Dev("nvidia0") + ": the character device 195:1, not 195:0"));
}

TEST_F(DeviceNodes, TheNodeIsNamedByTheMinorNumberNvidiaSmiGives) {
  SKIP_WITHOUT_MKNOD(Node("nvidia3", 195, 3) && Node("nvidiactl", 195, 255) &&
                     Node("nvidia-uvm", 235, 0));
  target_.gpus = {1};
  runner_.Answer([](const Command& c) -> absl::StatusOr<CommandResult> {
    if (Base(c.argv[0]) != "nvidia-smi") return absl::NotFoundError("not found");
    if (c.argv.size() == 1) return Exited(0, "| Driver Version: 580.1  CUDA Version: 13.0 |\n");
    if (c.argv[1] == "--query-gpu=index,minor_number") return Exited(0, "0, 2\n1, 3\n");
    return Exited(0, "0, NVIDIA H200, 9.0, 580.1\n1, NVIDIA H200, 9.0, 580.1\n");
  });
  const ToolchainSnapshot s = Probe();
  SCOPED_TRACE(s.DebugString());
  EXPECT_TRUE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(), IsEmpty());
  // A driver that refuses the field: the index stands in (and nvidia1 is missing).
  runner_.Answer([](const Command& c) -> absl::StatusOr<CommandResult> {
    if (Base(c.argv[0]) != "nvidia-smi") return absl::NotFoundError("not found");
    if (c.argv.size() == 1) return Exited(0, "| Driver Version: 580.1  CUDA Version: 13.0 |\n");
    if (c.argv[1] == "--query-gpu=index,minor_number") {
      return Exited(2, "Field \"minor_number\" is not a valid field to query.\n");
    }
    return Exited(0, "0, NVIDIA H200, 9.0, 580.1\n1, NVIDIA H200, 9.0, 580.1\n");
  });
  EXPECT_THAT(Probe().device_node_problems(), ElementsAre(Dev("nvidia1") + ": missing"));
}

TEST_F(DeviceNodes, NoDeviceDirAtAllIsReported) {
  target_.dev_root = tmp_.Join("no-dev");
  const ToolchainSnapshot s = Probe();
  EXPECT_TRUE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(), ElementsAre(tmp_.Join("no-dev") + ": no such directory"));
  EXPECT_THAT(s.notes(), Contains(HasSubstr("no GPU device node in this container: " +
                                            tmp_.Join("no-dev") + " is not a directory")));
}

TEST_F(DeviceNodes, NothingIsLookedForWithoutAGpuOrADevDir) {
  // Looked for: the dir is empty, so each node is a problem.
  ASSERT_FALSE(Probe().device_node_problems().empty());
  target_.dev_root = "";
  ToolchainSnapshot s = Probe();
  EXPECT_FALSE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(), IsEmpty());
  EXPECT_THAT(DeviceNotes(s), IsEmpty());
  target_.dev_root = dev();
  target_.gpus.clear();
  s = Probe();
  EXPECT_FALSE(s.device_nodes_checked());
  EXPECT_THAT(s.device_node_problems(), IsEmpty());
}

}  // namespace
}  // namespace fleet::agent

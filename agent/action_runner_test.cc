#include "agent/action_runner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

using Env = std::map<std::string, std::string>;

// Records every command and answers with `next`; runs nothing.
class FakeCommandRunner : public CommandRunner {
 public:
  absl::StatusOr<CommandResult> Run(const Command& command) override {
    commands.push_back(command);
    return next;
  }

  std::vector<Command> commands;
  absl::StatusOr<CommandResult> next = CommandResult{.exited = true, .exit_code = 0};
};

// How a message shows a value: escaped like absl::CHexEscape, so NUL and newlines are visible.
std::string Shown(const std::string& value) { return absl::CHexEscape(value); }

fleet::v1::Action Pip(const std::vector<std::pair<std::string, std::string>>& requirements) {
  fleet::v1::Action action;
  for (const auto& [name, version] : requirements) {
    fleet::v1::Requirement* r = action.mutable_pip_install()->add_requirements();
    r->set_name(name);
    r->set_version(version);
  }
  return action;
}

fleet::v1::Action Apt(const std::vector<std::string>& packages) {
  fleet::v1::Action action;
  for (const std::string& p : packages) action.mutable_apt_install()->add_packages(p);
  return action;
}

fleet::v1::Action ClearCache(const std::string& directory) {
  fleet::v1::Action action;
  action.mutable_clear_jit_cache()->set_directory(directory);
  return action;
}

fleet::v1::Action Link(const std::string& target, const std::string& link) {
  fleet::v1::Action action;
  action.mutable_symlink()->set_target(target);
  action.mutable_symlink()->set_link(link);
  return action;
}

fleet::v1::Action AddArgs(const std::vector<std::string>& args) {
  fleet::v1::Action action;
  for (const std::string& a : args) action.mutable_add_server_args()->add_args(a);
  return action;
}

// Injection attempts and malformed names that no grammar of ours may accept as a package name.
const std::vector<std::string>& HostileNames() {
  static const auto* names = new std::vector<std::string>{
      "",
      "torch; rm -rf /",
      "$(id)",
      "`id`",
      "a b",
      "--index-url=http://x",
      "-rrequirements.txt",
      "-e",
      "../x",
      "/abs/path",
      "./local",
      "torch|id",
      "torch&&id",
      "torch&",
      "'torch'",
      "\"torch\"",
      "torch>x",
      "name==1.0;x",
      "to\nrch",
      std::string("to\0rch", 6),
      "torch\t",
      "t\xd0\xbe"
      "rch",  // Cyrillic o
      "http://evil.example/torch.whl",
  };
  return *names;
}

TEST(ActionGrammar, AcceptsPipRequirements) {
  const std::vector<std::pair<std::string, std::string>> good = {
      {"torch", "2.9.1+cu130"},
      {"nvidia-cuda-nvcc", "13.2.78"},
      {"sgl-kernel", "0.3.9.post2"},
      {"flashinfer_python", "0.5.3"},
      {"zope.interface", "6.0"},
      {"A", "1"},
      {"ninja", "1.11.1.4"},
      {"pkg", "1.0rc1"},
      {"pkg", "2.0a1"},
      {"pkg", "1.0.dev3"},
      {"pkg", "1.0b2.post1.dev0+local.7"}};
  for (const auto& [name, version] : good) {
    EXPECT_TRUE(ValidatePipRequirement(name, version).ok())
        << name << "==" << version << ": " << ValidatePipRequirement(name, version);
  }
}

TEST(ActionGrammar, RejectsPipNamesNamingTheValue) {
  std::vector<std::string> bad = HostileNames();
  for (const char* more : {"torch-", ".torch", "torch_", "torch==1.0", "torch>=2", "torch[cuda]",
                           "torch@https://x/y.whl"}) {
    bad.push_back(more);
  }
  for (const std::string& name : bad) {
    const absl::Status s = ValidatePipRequirement(name, "1.0");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Shown(name);
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + Shown(name) + "'")) << s;
  }
  EXPECT_THAT(std::string(ValidatePipRequirement("-rrequirements.txt", "1").message()),
              HasSubstr("option"));
  EXPECT_THAT(std::string(ValidatePipRequirement("/abs/path", "1").message()), HasSubstr("path"));
  EXPECT_THAT(std::string(ValidatePipRequirement("torch; rm -rf /", "1").message()),
              HasSubstr("';'"));
  EXPECT_THAT(std::string(ValidatePipRequirement(std::string("to\0rch", 6), "1").message()),
              HasSubstr("NUL"));
}

TEST(ActionGrammar, RejectsPipVersions) {
  std::vector<std::string> bad = HostileNames();
  for (const char* more :
       {"1.0;x", ">=1.0", "==1.0", "1.0 ", " 1.0", "1.*", "v1.0", "1..0", "1.0+", "1.0.", "--pre",
        "1.0 ; python_version<'3'", "1!2.0", "1.0-1", "latest", "https://x/torch-2.9.1.whl"}) {
    bad.push_back(more);
  }
  for (const std::string& version : bad) {
    const absl::Status s = ValidatePipRequirement("torch", version);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Shown(version);
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + Shown(version) + "'")) << s;
  }
}

TEST(ActionGrammar, AptPackages) {
  for (const char* good : {"ninja-build", "g++", "libstdc++6", "python3.11", "ninja-build=1.11.1-1",
                           "cuda-nvcc-13-0=13.0.88-1", "libc6=2:2.36-9+deb12u4", "xz-utils"}) {
    EXPECT_TRUE(ValidateAptPackage(good).ok()) << good << ": " << ValidateAptPackage(good);
  }
  std::vector<std::string> bad = HostileNames();
  for (const char* more :
       {"Ninja", "n", "ninja-build-", "-oAPT::Get::AllowUnauthenticated=1", "--allow-downgrades",
        "/tmp/x.deb", "ninja-build/bookworm", "ninja-build:amd64",
        "ninja-build=", "ninja-build=$(id)", "ninja-build=1.0 x", "ninja-build=v1", "ninja*",
        "ninja-build;id", "ninja_build"}) {
    bad.push_back(more);
  }
  for (const std::string& name : bad) {
    const absl::Status s = ValidateAptPackage(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Shown(name);
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + Shown(name) + "'")) << s;
  }
  EXPECT_THAT(std::string(ValidateAptPackage("ninja-build-").message()), HasSubstr("remove"));
}

TEST(ActionGrammar, EnvNamesAndValues) {
  for (const char* good : {"PATH", "CUDA_HOME", "_x", "MAX_JOBS", "a1"}) {
    EXPECT_TRUE(ValidateEnvName(good).ok()) << good;
  }
  for (const std::string& bad : {std::string(""), std::string("1X"), std::string("A-B"),
                                 std::string("A B"), std::string("A=B"), std::string("$(id)"),
                                 std::string("A\n"), std::string("A\0B", 3), std::string("-A")}) {
    const absl::Status s = ValidateEnvName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Shown(bad);
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + Shown(bad) + "'"));
  }
  for (const char* good : {"", "/usr/local/cuda", "a b;$(id)`x`|&'\"", "8", "x=y:z"}) {
    EXPECT_TRUE(ValidateEnvValue(good).ok()) << good;
  }
  EXPECT_THAT(std::string(ValidateEnvValue("a\nb").message()), HasSubstr("newline"));
  EXPECT_THAT(std::string(ValidateEnvValue(std::string("a\0b", 3)).message()), HasSubstr("NUL"));
  EXPECT_FALSE(ValidateEnvValue("a\rb").ok());
}

TEST(ActionGrammar, ServerArgs) {
  for (const char* good :
       {"--disable-cuda-graph", "--attention-backend=triton", "--attention-backend", "triton",
        "--mem-fraction-static=0.85", "0.85", "-1", "--json-model-override-args={\"a\": 1}"}) {
    EXPECT_TRUE(ValidateServerArg(good).ok()) << good << ": " << ValidateServerArg(good);
  }
  for (const std::string& bad :
       {std::string(""), std::string("--"), std::string("-"), std::string("--=x"),
        std::string("--a b"), std::string("--x\n--y"), std::string("--x=1\0", 6),
        std::string("--$(id)"), std::string("---x")}) {
    const absl::Status s = ValidateServerArg(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Shown(bad);
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + Shown(bad) + "'"));
  }
}

ActionContext FakeContext() {
  ActionContext context;
  context.env = {
      {"PATH", "/srv/venv/bin:/usr/bin"}, {"HOME", "/root"}, {"HF_TOKEN", "hf_s3cr3t_v4lue"}};
  context.pip = {"/srv/venv/bin/pip"};
  context.venv = "/srv/venv";
  context.apt_get = {"/usr/bin/apt-get"};
  context.timeout = absl::Minutes(7);
  return context;
}

TEST(ActionRunner, PipInstallRunsTheServersPipWithItsEnvironment) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  ActionContext context = FakeContext();
  context.pip_options = {"--index-url", "https://download.pytorch.org/whl/cu130", "--no-deps",
                         "--extra-index-url=https://user:pw@pypi.example.com:8443/simple/"};
  const fleet::v1::Action action =
      Pip({{"nvidia-cuda-nvcc", "13.2.78"}, {"nvidia-cuda-runtime", "13.2.75"}});
  const fleet::v1::ActionResult result = runner.Apply(action, context);
  ASSERT_EQ(fake.commands.size(), 1u);
  const Command& c = fake.commands[0];
  EXPECT_THAT(c.argv, ElementsAre("/srv/venv/bin/pip", "install", "--index-url",
                                  "https://download.pytorch.org/whl/cu130", "--no-deps",
                                  "--extra-index-url=https://user:pw@pypi.example.com:8443/simple/",
                                  "nvidia-cuda-nvcc==13.2.78", "nvidia-cuda-runtime==13.2.75"));
  EXPECT_EQ(c.env, context.env);
  EXPECT_EQ(c.timeout, absl::Minutes(7));
  EXPECT_TRUE(result.ok()) << result.message();
  EXPECT_THAT(result.message(), HasSubstr("exit status 0"));
  EXPECT_EQ(result.action().DebugString(), action.DebugString());
  EXPECT_TRUE(result.has_took());
}

TEST(ActionRunner, PipInstallDefaultsToTheVenvsPython) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  ActionContext context = FakeContext();
  context.pip.clear();
  EXPECT_TRUE(runner.Apply(Pip({{"ninja", "1.13.0"}}), context).ok());
  ASSERT_EQ(fake.commands.size(), 1u);
  EXPECT_THAT(fake.commands[0].argv,
              ElementsAre("/srv/venv/bin/python", "-m", "pip", "install", "ninja==1.13.0"));

  context.venv.clear();
  const fleet::v1::ActionResult none = runner.Apply(Pip({{"ninja", "1.13.0"}}), context);
  EXPECT_FALSE(none.ok());
  EXPECT_THAT(none.message(), HasSubstr("no pip"));
  EXPECT_EQ(fake.commands.size(), 1u);
}

TEST(ActionRunner, AptInstallRunsNoninteractivelyOnTheSystemPath) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  const ActionContext context = FakeContext();
  const fleet::v1::ActionResult result = runner.Apply(Apt({"ninja-build", "xz-utils"}), context);
  EXPECT_TRUE(result.ok()) << result.message();
  ASSERT_EQ(fake.commands.size(), 1u);
  const Command& c = fake.commands[0];
  EXPECT_THAT(c.argv, ElementsAre("/usr/bin/apt-get", "install", "-y", "--no-install-recommends",
                                  "ninja-build", "xz-utils"));
  Env expected = context.env;
  expected["DEBIAN_FRONTEND"] = "noninteractive";
  expected["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  EXPECT_EQ(c.env, expected);

  ActionContext bare = context;
  bare.apt_get.clear();
  EXPECT_TRUE(runner.Apply(Apt({"ninja-build"}), bare).ok());
  ASSERT_EQ(fake.commands.size(), 2u);
  EXPECT_EQ(fake.commands[1].argv[0], "apt-get");
}

TEST(ActionRunner, RunsNothingForARejectedAction) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  const ActionContext context = FakeContext();
  std::vector<fleet::v1::Action> rejected;
  for (const std::string& name : HostileNames()) {
    rejected.push_back(Pip({{"ninja", "1.13.0"}, {name, "1.0"}}));
    rejected.push_back(Pip({{"torch", name}}));
    rejected.push_back(Apt({"ninja-build", name}));
  }
  rejected.push_back(Pip({}));
  rejected.push_back(Apt({}));
  rejected.push_back(Pip({{"Torch", "2.9.1"}, {"torch", "2.9.0"}}));
  rejected.push_back(fleet::v1::Action());
  for (const fleet::v1::Action& action : rejected) {
    const fleet::v1::ActionResult result = runner.Apply(action, context);
    EXPECT_FALSE(result.ok()) << action.ShortDebugString();
    EXPECT_THAT(result.message(), StartsWith("rejected: ")) << action.ShortDebugString();
    EXPECT_EQ(result.action().DebugString(), action.DebugString());
  }
  // Options from the config are held to an allow-list too.
  for (const std::vector<std::string>& options :
       std::vector<std::vector<std::string>>{{"--trusted-host", "x"},
                                             {"-r", "/etc/shadow"},
                                             {"--requirement=/etc/shadow"},
                                             {"-e", "."},
                                             {"--target=/"},
                                             {"--index-url"},
                                             {"--index-url", "file:///etc"},
                                             {"--index-url", "http://x/$(id)"},
                                             {"--index-url", "https://x/simple?a=1&b=2"},
                                             {"--extra-index-url=http://x y"},
                                             {"--no-deps;id"}}) {
    ActionContext with_options = context;
    with_options.pip_options = options;
    const fleet::v1::ActionResult result = runner.Apply(Pip({{"ninja", "1.13.0"}}), with_options);
    EXPECT_FALSE(result.ok()) << options[0];
    EXPECT_THAT(result.message(), HasSubstr("pip option")) << result.message();
  }
  EXPECT_THAT(fake.commands, IsEmpty());
}

TEST(ActionRunner, AFailedToolReportsItsExitAndARedactedTail) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  const ActionContext context = FakeContext();
  fake.next =
      CommandResult{.exited = true,
                    .exit_code = 1,
                    .output =
                        "Looking in indexes: https://__token__:hf_s3cr3t_v4lue@pypi.example.com\n"
                        "ERROR: No matching distribution found for torch==9.9.9\n"};
  const fleet::v1::ActionResult failed = runner.Apply(Pip({{"torch", "9.9.9"}}), context);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.message(), "pip install torch==9.9.9: exit status 1");
  EXPECT_THAT(failed.output_tail(), HasSubstr("No matching distribution found for torch==9.9.9"));
  EXPECT_THAT(failed.output_tail(), HasSubstr("https://__token__:<redacted>@pypi"));
  EXPECT_THAT(failed.output_tail(), Not(HasSubstr("hf_s3cr3t_v4lue")));

  fake.next = CommandResult{.exited = false, .signal = 9, .timed_out = true};
  const fleet::v1::ActionResult timed_out = runner.Apply(Apt({"ninja-build"}), context);
  EXPECT_FALSE(timed_out.ok());
  EXPECT_THAT(timed_out.message(), HasSubstr("timed out after 7m"));

  fake.next = CommandResult{.exited = false, .signal = 11};
  EXPECT_THAT(runner.Apply(Apt({"ninja-build"}), context).message(),
              HasSubstr("killed by signal 11"));

  fake.next = absl::NotFoundError("apt-get: not found on the PATH given");
  const fleet::v1::ActionResult missing = runner.Apply(Apt({"ninja-build"}), context);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("apt-get: not found"));
}

TEST(ActionRunner, KeepsTheEndOfALongOutput) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  std::string output;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&output, "Collecting line ", i, "\n");
  output += "ERROR: the last line\n";
  fake.next = CommandResult{.exited = true, .exit_code = 1, .output = output};
  const fleet::v1::ActionResult result = runner.Apply(Pip({{"torch", "2.9.1"}}), FakeContext());
  EXPECT_LE(result.output_tail().size(), 16u << 10);
  EXPECT_THAT(result.output_tail(), ::testing::EndsWith("ERROR: the last line\n"));
}

TEST(ActionRunner, EnvAndArgumentActionsAreAnsweredWithoutRunningAnything) {
  FakeCommandRunner fake;
  ActionRunner runner(&fake);
  const ActionContext context = FakeContext();

  fleet::v1::Action set_env;
  set_env.mutable_set_env()->set_name("CUDA_HOME");
  set_env.mutable_set_env()->set_value("/srv/venv/lib/python3.12/site-packages/nvidia/cu13");
  fleet::v1::ActionResult r = runner.Apply(set_env, context);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("CUDA_HOME=/srv/venv"));
  EXPECT_THAT(r.message(), HasSubstr("next launch"));

  // A secret's value appears nowhere in the result.
  fleet::v1::Action secret;
  secret.mutable_set_env()->set_name("HF_TOKEN");
  secret.mutable_set_env()->set_value("brand-new-token-value");
  r = runner.Apply(secret, context);
  EXPECT_TRUE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("HF_TOKEN=<redacted>"));
  EXPECT_EQ(r.action().set_env().value(), "<redacted>");
  EXPECT_THAT(r.DebugString(), Not(HasSubstr("brand-new-token-value")));
  secret.mutable_set_env()->set_value("brand-new\ntoken");
  r = runner.Apply(secret, context);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("newline"));
  EXPECT_THAT(r.DebugString(), Not(HasSubstr("brand-new")));

  fleet::v1::Action bad_env;
  bad_env.mutable_set_env()->set_name("LD_PRELOAD;id");
  bad_env.mutable_set_env()->set_value("x");
  EXPECT_FALSE(runner.Apply(bad_env, context).ok());

  fleet::v1::Action prepend;
  prepend.mutable_prepend_path()->set_variable("LD_LIBRARY_PATH");
  prepend.mutable_prepend_path()->set_directory(
      "/srv/venv/lib/python3.12/site-packages/nvidia/cu13/lib");
  r = runner.Apply(prepend, context);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("next launch"));
  for (const char* variable : {"CPATH", "LIBRARY_PATH", "PATH"}) {
    prepend.mutable_prepend_path()->set_variable(variable);
    EXPECT_TRUE(runner.Apply(prepend, context).ok()) << variable;
  }
  for (const char* variable : {"PYTHONPATH", "LD_PRELOAD", "path", ""}) {
    prepend.mutable_prepend_path()->set_variable(variable);
    r = runner.Apply(prepend, context);
    EXPECT_FALSE(r.ok()) << variable;
    EXPECT_THAT(r.message(), HasSubstr(absl::StrCat("'", variable, "'")));
  }
  prepend.mutable_prepend_path()->set_variable("LD_LIBRARY_PATH");
  for (const char* directory :
       {"relative/lib", "/a/../b", "/a/./b", "/a//b", "/a/b/", "/a:/b", "", "/a\nb", "$(id)"}) {
    prepend.mutable_prepend_path()->set_directory(directory);
    r = runner.Apply(prepend, context);
    EXPECT_FALSE(r.ok()) << directory;
    EXPECT_THAT(r.message(), HasSubstr(absl::StrCat("'", Shown(directory), "'")));
  }

  EXPECT_TRUE(runner.Apply(AddArgs({"--disable-cuda-graph"}), context).ok());
  r = runner.Apply(AddArgs({"--attention-backend", "triton"}), context);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("--attention-backend triton"));
  EXPECT_TRUE(runner.Apply(AddArgs({"--attention-backend=triton"}), context).ok());
  EXPECT_FALSE(runner.Apply(AddArgs({"triton"}), context).ok());
  EXPECT_FALSE(runner.Apply(AddArgs({}), context).ok());
  EXPECT_FALSE(runner.Apply(AddArgs({"--x", "a\nb"}), context).ok());
  fleet::v1::Action remove;
  remove.mutable_remove_server_args()->add_args("--disable-cuda-graph");
  r = runner.Apply(remove, context);
  EXPECT_TRUE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("RemoveServerArgs --disable-cuda-graph"));

  EXPECT_THAT(fake.commands, IsEmpty());
}

// A world of tests/sim/make_sim_world.sh, acted on with the real PosixCommandRunner and the world's
// own pip-sim and apt-get-sim: never the machine's pip or apt-get.
class SimWorldActions : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<fleet::sim::testing::SimWorld> world =
        fleet::sim::testing::SimWorld::Create(dir_.Join("world"), "seed");
    ASSERT_TRUE(world.ok()) << world.status();
    world_.emplace(*std::move(world));
    context_.env = world_->ServerEnv();
    // pip-sim starts with `#!/usr/bin/env bash`, which a server's PATH (no system directory)
    // cannot resolve; bash runs it, as python would run the real pip's module.
    context_.pip = {"/bin/bash", world_->Path("venv/bin/pip")};
    context_.venv = world_->Path("venv");
    context_.apt_get = {world_->Path("bin/apt-get")};
    context_.timeout = absl::Seconds(60);
  }

  std::string NvccVersion() {
    PosixCommandRunner posix;
    absl::StatusOr<CommandResult> r =
        posix.Run({.argv = {world_->CudaDir() + "/bin/nvcc", "--version"}, .env = context_.env});
    if (!r.ok()) return std::string(r.status().message());
    return r->output;
  }

  fleet::testing::TempDir dir_;
  std::optional<fleet::sim::testing::SimWorld> world_;
  ActionContext context_;
  PosixCommandRunner posix_;
  ActionRunner runner_{&posix_};
};

TEST_F(SimWorldActions, PipInstallChangesTheWorld) {
  const std::string dist_info =
      world_->Path("venv/lib/python3.12/site-packages/nvidia_cuda_nvcc-13.2.78.dist-info/METADATA");
  ASSERT_FALSE(std::filesystem::exists(dist_info));
  const fleet::v1::ActionResult r = runner_.Apply(Pip({{"nvidia-cuda-nvcc", "13.2.78"}}), context_);
  EXPECT_TRUE(r.ok()) << r.message() << "\n" << r.output_tail();
  EXPECT_EQ(r.message(), "pip install nvidia-cuda-nvcc==13.2.78: exit status 0");
  EXPECT_THAT(r.output_tail(), HasSubstr("Successfully installed nvidia-cuda-nvcc-13.2.78"));
  EXPECT_TRUE(std::filesystem::exists(dist_info));
  EXPECT_THAT(NvccVersion(), HasSubstr("Cuda compilation tools, release 13.2, V13.2.78"));
}

TEST_F(SimWorldActions, PipInstallOfAnUnknownVersionFailsWithPipsError) {
  const fleet::v1::ActionResult r = runner_.Apply(Pip({{"nvidia-cuda-nvcc", "13.9.1"}}), context_);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "pip install nvidia-cuda-nvcc==13.9.1: exit status 1");
  EXPECT_THAT(r.output_tail(),
              HasSubstr("ERROR: No matching distribution found for nvidia-cuda-nvcc==13.9.1"));
  EXPECT_FALSE(std::filesystem::exists(world_->CudaDir() + "/bin/nvcc"));
}

TEST_F(SimWorldActions, AptInstallPutsNinjaInTheWorldsBin) {
  const std::string ninja = world_->Path("bin/ninja");
  ASSERT_FALSE(std::filesystem::exists(ninja));
  const fleet::v1::ActionResult r = runner_.Apply(Apt({"ninja-build"}), context_);
  EXPECT_TRUE(r.ok()) << r.message() << "\n" << r.output_tail();
  EXPECT_EQ(r.message(), "apt-get install ninja-build: exit status 0");
  EXPECT_THAT(r.output_tail(), HasSubstr("Setting up ninja-build"));
  EXPECT_EQ(access(ninja.c_str(), X_OK), 0);

  const fleet::v1::ActionResult unknown = runner_.Apply(Apt({"no-such-package"}), context_);
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.message(), "apt-get install no-such-package: exit status 100");
  EXPECT_THAT(unknown.output_tail(), HasSubstr("E: Unable to locate package no-such-package"));
}

// A temp dir with a cache root, a toolkit root and a directory outside both.
class FileActions : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.WriteFile("cache/flashinfer/0.5.3/120/cached_ops/a/a.so", "a");
    dir_.WriteFile("cache/flashinfer/0.5.3/120/cached_ops/b.so", "b");
    dir_.WriteFile("cache/flashinfer/0.5.3/120/lock", "");
    dir_.WriteFile("outside/keep.txt", "keep");
    dir_.WriteFile("cuda/lib/libcudart.so.13", "13");
    dir_.WriteFile("cuda/lib/libcudart.so.12", "12");
    dir_.WriteFile("driver/libcuda.so.1", "driver");
    context_.jit_cache_roots = {dir_.Join("cache")};
    context_.toolkit_roots = {dir_.Join("cuda")};
  }

  std::string Path(const std::string& relative) const { return dir_.Join(relative); }
  static bool Exists(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
  }
  static std::string ReadLink(const std::string& path) {
    std::error_code ec;
    return std::filesystem::read_symlink(path, ec).string();
  }

  fleet::testing::TempDir dir_;
  ActionContext context_;
  FakeCommandRunner fake_;
  ActionRunner runner_{&fake_};
};

TEST_F(FileActions, ClearJitCacheRemovesTheTreeButNothingALinkPointsTo) {
  ASSERT_EQ(symlink(Path("outside").c_str(), Path("cache/flashinfer/0.5.3/escape").c_str()), 0);
  ASSERT_EQ(symlink(Path("outside/keep.txt").c_str(),
                    Path("cache/flashinfer/0.5.3/120/keep_link").c_str()),
            0);
  const fleet::v1::ActionResult r = runner_.Apply(ClearCache(Path("cache/flashinfer")), context_);
  EXPECT_TRUE(r.ok()) << r.message();
  // flashinfer 0.5.3 120 cached_ops a a.so b.so lock escape keep_link
  EXPECT_THAT(r.message(), HasSubstr(": 10 entries"));
  EXPECT_FALSE(Exists(Path("cache/flashinfer")));
  EXPECT_TRUE(Exists(Path("cache")));
  EXPECT_EQ(fleet::testing::ReadFile(Path("outside/keep.txt")), "keep");
  EXPECT_TRUE(r.has_took());

  const fleet::v1::ActionResult again =
      runner_.Apply(ClearCache(Path("cache/flashinfer")), context_);
  EXPECT_TRUE(again.ok());
  EXPECT_THAT(again.message(), HasSubstr("nothing to remove"));
  EXPECT_THAT(fake_.commands, IsEmpty());
}

TEST_F(FileActions, ClearJitCacheStaysStrictlyBelowItsRoots) {
  ASSERT_EQ(symlink(Path("outside").c_str(), Path("cache/evil").c_str()), 0);
  dir_.WriteFile("outside/sub/x", "x");
  dir_.WriteFile("cache/plain-file", "f");
  const std::vector<std::string> refused = {
      Path("cache"),             // the root itself
      Path("outside"),           // outside
      Path("cache/../outside"),  // a '..' escape
      Path("cache/evil"),        // a symlinked directory that resolves outside
      Path("cache/evil/sub"),    // below one
      Path("cache/plain-file"),  // not a directory
      "/",
      "relative/cache",
      "",
  };
  for (const std::string& directory : refused) {
    const fleet::v1::ActionResult r = runner_.Apply(ClearCache(directory), context_);
    EXPECT_FALSE(r.ok()) << directory;
    EXPECT_THAT(r.message(), StartsWith("rejected: ")) << r.message();
    EXPECT_THAT(r.message(), HasSubstr(directory)) << r.message();
  }
  EXPECT_EQ(fleet::testing::ReadFile(Path("outside/keep.txt")), "keep");
  EXPECT_EQ(fleet::testing::ReadFile(Path("outside/sub/x")), "x");
  EXPECT_EQ(ReadLink(Path("cache/evil")), Path("outside"));
  EXPECT_TRUE(Exists(Path("cache/flashinfer/0.5.3/120/lock")));

  ActionContext no_roots = context_;
  no_roots.jit_cache_roots.clear();
  const fleet::v1::ActionResult r = runner_.Apply(ClearCache(Path("cache/flashinfer")), no_roots);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("jit_cache_roots"));
  EXPECT_TRUE(Exists(Path("cache/flashinfer")));
}

TEST_F(FileActions, ClearJitCacheResolvesRootsAndLinksInside) {
  // A root given through a symlink, and a cache directory that is a link to another inside it.
  ASSERT_EQ(symlink(Path("cache").c_str(), Path("cache-link").c_str()), 0);
  ASSERT_EQ(symlink(Path("cache/flashinfer").c_str(), Path("cache/current").c_str()), 0);
  ActionContext linked = context_;
  linked.jit_cache_roots = {Path("cache-link")};
  const fleet::v1::ActionResult r = runner_.Apply(ClearCache(Path("cache/current")), linked);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE(Exists(Path("cache/flashinfer")));
}

TEST_F(FileActions, ClearJitCacheRemovesATreeDeeperThanAPathCanNameByDescriptors) {
  // 30 levels of 200-byte names: deeper than PATH_MAX, so only a walk by descriptors (openat,
  // unlinkat) reaches the bottom, where a planted link points outside the cache.
  int fd = open(Path("cache/flashinfer").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string name(200, 'd');
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(mkdirat(fd, name.c_str(), 0700), 0);
    const int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  const int file = openat(fd, "deep.so", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(file, 0);
  close(file);
  ASSERT_EQ(symlinkat(Path("outside").c_str(), fd, "escape"), 0);
  close(fd);
  const fleet::v1::ActionResult r = runner_.Apply(ClearCache(Path("cache/flashinfer")), context_);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE(Exists(Path("cache/flashinfer")));
  EXPECT_EQ(fleet::testing::ReadFile(Path("outside/keep.txt")), "keep");
}

TEST_F(FileActions, SymlinkCreatesAndReplacesALinkBelowTheRoot) {
  const std::string link = Path("cuda/lib/libcudart.so");
  fleet::v1::ActionResult r = runner_.Apply(Link("libcudart.so.13", link), context_);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("created"));
  EXPECT_EQ(ReadLink(link), "libcudart.so.13");
  EXPECT_EQ(fleet::testing::ReadFile(link), "13");

  r = runner_.Apply(Link("libcudart.so.12", link), context_);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("replaced (was -> libcudart.so.13)"));
  EXPECT_EQ(ReadLink(link), "libcudart.so.12");

  r = runner_.Apply(Link("libcudart.so.12", link), context_);
  EXPECT_TRUE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("already"));

  // A directory link, and a link whose directories do not exist yet (to a file outside the root).
  r = runner_.Apply(Link(Path("cuda/lib"), Path("cuda/lib64")), context_);
  EXPECT_TRUE(r.ok()) << r.message();
  r = runner_.Apply(Link(Path("driver/libcuda.so.1"), Path("cuda/lib64/stubs/libcuda.so")),
                    context_);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(fleet::testing::ReadFile(Path("cuda/lib/stubs/libcuda.so")), "driver");

  // No temporary link is left behind.
  for (const auto& entry : std::filesystem::directory_iterator(Path("cuda/lib"))) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr("fleet-tmp"))) << entry.path();
  }
  EXPECT_THAT(fake_.commands, IsEmpty());
}

TEST_F(FileActions, SymlinkRefusesOutsideTheRootAndNeverReplacesAFileOrDirectory) {
  ASSERT_EQ(symlink(Path("outside").c_str(), Path("cuda/out").c_str()), 0);
  struct Case {
    std::string target, link, why;
  };
  const std::vector<Case> refused = {
      {Path("cuda/lib/libcudart.so.13"), Path("outside/libcudart.so"), "not below"},
      {Path("cuda/lib/libcudart.so.13"), Path("cuda/out/libcudart.so"), "not below"},
      {Path("cuda/lib/libcudart.so.13"), Path("cuda/../outside/x"), ".."},
      {Path("cuda/lib/libcudart.so.13"), Path("cuda"), "not below"},
      {"libcudart.so.12", Path("cuda/lib/libcudart.so.13"), "regular file"},
      {Path("cuda/lib/libcudart.so.13"), Path("cuda/lib"), "directory"},
      {"libcudart.so.11", Path("cuda/lib/libcudart.so"), "No such file"},
      {"", Path("cuda/lib/libcudart.so"), "empty"},
      {"libcudart.so.13\n", Path("cuda/lib/libcudart.so"), "newline"},
      {"libcudart.so.13", "cuda/lib/libcudart.so", "absolute"},
  };
  for (const Case& c : refused) {
    const fleet::v1::ActionResult r = runner_.Apply(Link(c.target, c.link), context_);
    EXPECT_FALSE(r.ok()) << c.link;
    EXPECT_THAT(r.message(), StartsWith("rejected: ")) << r.message();
    EXPECT_THAT(r.message(), HasSubstr(c.why)) << r.message();
  }
  EXPECT_FALSE(Exists(Path("outside/libcudart.so")));
  EXPECT_FALSE(Exists(Path("cuda/lib/libcudart.so")));
  EXPECT_EQ(fleet::testing::ReadFile(Path("cuda/lib/libcudart.so.13")), "13");
  EXPECT_TRUE(std::filesystem::is_directory(Path("cuda/lib")));

  ActionContext no_roots = context_;
  no_roots.toolkit_roots.clear();
  EXPECT_FALSE(
      runner_.Apply(Link("libcudart.so.13", Path("cuda/lib/libcudart.so")), no_roots).ok());
  EXPECT_FALSE(Exists(Path("cuda/lib/libcudart.so")));
}

}  // namespace
}  // namespace fleet::agent

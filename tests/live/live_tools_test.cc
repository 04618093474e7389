// Live tool output: runs this machine's real ptxas, nvcc, g++/ld, ninja and /bin/sh in a temp dir
// to produce real failures, captures what they print, and checks that the classifier names each
// one from that output: the class, the root-cause line (the line that holds the tool's error),
// the facts and toolchain_fix. Each log is classified whole (ClassifyFile) and streamed in
// random-size chunks (AddBytes), and both must agree. Nothing needs a GPU. A test skips, saying
// why, only where a tool it runs is absent (no CUDA toolkit at /usr/local/cuda, no ninja, ...).
//
// Expected values come from the tools' own output where they are the tool's to choose (the PTX
// version this ptxas supports, the line its error is on), never from what the catalogue matches.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis.h"
#include "common/diagnosis/diagnosis_format.h"
#include "common/diagnosis/log_file.h"
#include "common/diagnosis/signature_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::diagnosis {
namespace {

using ::fleet::testing::ReadFile;
using ::fleet::testing::RunOptions;
using ::fleet::testing::RunResult;
using ::fleet::testing::SplitLines;
using ::fleet::testing::TempDir;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::Field;
using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

constexpr char kPtxas[] = "/usr/local/cuda/bin/ptxas";
constexpr char kNvcc[] = "/usr/local/cuda/bin/nvcc";
constexpr char kCudaInclude[] = "/usr/local/cuda/include";
// The PATH every tool runs with: CUDA's bin first, as a JIT build sees it, then the system's.
constexpr char kToolPath[] = "/usr/local/cuda/bin:/usr/bin:/bin";
// The op name a torch-style JIT build.ninja passes as -DTORCH_EXTENSION_NAME.
constexpr char kJitOp[] = "fleet_live_op";

// A trivial kernel in PTX with the ISA version `version`.
std::string PtxSource(std::string_view version) {
  return absl::StrCat(".version ", fleet::AsAbsl(version),
                      "\n"
                      ".target sm_90\n"
                      ".address_size 64\n"
                      "\n"
                      ".visible .entry fleet_live_kernel()\n"
                      "{\n"
                      "\tret;\n"
                      "}\n");
}

// A kernel that includes a CCCL header, as the JIT kernels of flashinfer and sgl-kernel do.
constexpr char kGoodKernel[] =
    "#include <cuda/std/cstdint>\n"
    "__global__ void fleet_live_kernel(cuda::std::int32_t* p) { *p = 1; }\n";

const SignatureMatcher& Matcher() { return SignatureMatcher::Builtin(); }

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// Where `tool` (a path, or a name looked up on kToolPath) is, or "".
std::string Locate(const std::string& tool) {
  if (tool.find('/') != std::string::npos) return IsExecutable(tool) ? tool : "";
  return fleet::testing::FindOnPath(tool, kToolPath);
}

// "" when every tool is there; otherwise why the test cannot run.
std::string MissingTools(const std::vector<std::string>& tools) {
  for (const std::string& tool : tools) {
    if (Locate(tool).empty()) {
      return absl::StrCat(tool, " is not installed (looked on ", kToolPath, ")");
    }
  }
  return "";
}

#define SKIP_UNLESS_TOOLS(...)                                     \
  do {                                                             \
    const std::string missing_tools = MissingTools({__VA_ARGS__}); \
    if (!missing_tools.empty()) GTEST_SKIP() << missing_tools;     \
  } while (false)

// The 1-based number of the first line that contains every one of `needles`, or 0.
int64_t LineContaining(const std::vector<std::string_view>& lines,
                       const std::vector<std::string_view>& needles) {
  for (size_t i = 0; i < lines.size(); ++i) {
    const bool all = std::all_of(needles.begin(), needles.end(), [&](std::string_view n) {
      return lines[i].find(n) != std::string::npos;
    });
    if (all) return static_cast<int64_t>(i) + 1;
  }
  return 0;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The ninja FAILED block that starts at line `failed` (1-based): its lines up to the next ninja
// status line ("[n/m] ...") or ninja's own "ninja: ..." line.
std::vector<int64_t> FailedBlock(const std::vector<std::string_view>& lines, int64_t failed) {
  std::vector<int64_t> block;
  for (int64_t n = failed; n <= static_cast<int64_t>(lines.size()); ++n) {
    const std::string_view line = lines[static_cast<size_t>(n - 1)];
    if (n > failed && (StartsWith(line, "[") || StartsWith(line, "ninja: "))) break;
    block.push_back(n);
  }
  return block;
}

std::string ExplainJson(const Diagnosis& d) {
  std::string json;
  AppendExplainJson("live.log", d, &json);
  return json;
}

// A tool environment: only what the tools need, so nothing of the test's environment
// (LIBRARY_PATH, CPATH, CUDA_HOME) leaks in and changes what they find.
Env ToolEnv(const TempDir& dir) {
  return Env{
      {"PATH", kToolPath}, {"HOME", dir.path()}, {"TMPDIR", dir.path()}, {"LC_ALL", "C.UTF-8"}};
}

class LiveToolTest : public ::testing::Test {
 protected:
  // Runs `argv` in the temp dir, its stdout and stderr appended to the log `log`.
  absl::StatusOr<RunResult> RunTool(const std::vector<std::string>& argv, const std::string& log,
                                    const Env& env) {
    RunOptions options;
    options.env = env;
    options.cwd = dir_.path();
    options.output_path = dir_.Join(log);
    return fleet::testing::Run(argv, options);
  }
  absl::StatusOr<RunResult> RunTool(const std::vector<std::string>& argv, const std::string& log) {
    return RunTool(argv, log, ToolEnv(dir_));
  }

  // Classifies the log `log` of the temp dir whole, then streamed in random-size chunks (with
  // snapshots between chunks), and expects the same diagnosis every way.
  void Classify(const std::string& log, Diagnosis* out) {
    const std::string path = dir_.Join(log);
    absl::StatusOr<Diagnosis> whole = ClassifyFile(path, Matcher());
    ASSERT_TRUE(whole.ok()) << whole.status();
    const std::string text = ReadFile(path);
    ASSERT_EQ(whole->lines, static_cast<int64_t>(SplitLines(text).size()));
    const std::string expected = ExplainJson(*whole);
    // Seeds are fixed: the chunking is arbitrary but the same on every run.
    for (const uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
      std::mt19937 rng(seed);
      std::uniform_int_distribution<size_t> chunk(1, seed <= 3 ? 16 : 4096);
      Classifier classifier(&Matcher());
      for (size_t pos = 0; pos < text.size();) {
        const size_t n = std::min(chunk(rng), text.size() - pos);
        classifier.AddBytes(std::string_view(text).substr(pos, n));
        pos += n;
        if (rng() % 8 == 0) static_cast<void>(classifier.Snapshot());
      }
      const Diagnosis streamed = classifier.Finish();
      EXPECT_EQ(ExplainJson(streamed), expected) << "chunking seed " << seed;
      EXPECT_EQ(streamed.lines, whole->lines) << "chunking seed " << seed;
    }
    *out = *std::move(whole);
  }

  // Writes build.ninja and runs ninja on `target` (one job, so the output order is fixed).
  absl::StatusOr<RunResult> RunNinja(const std::string& build_ninja, const std::string& target,
                                     const std::string& log) {
    dir_.WriteFile("build.ninja", build_ninja);
    return RunTool({Locate("ninja"), "-j1", target}, log);
  }

  TempDir dir_;
};

// Expects the root cause at line `expected` (1-based, > 0) and that line, verbatim, in the
// evidence.
void ExpectRootCauseAt(const Diagnosis& d, const std::vector<std::string_view>& lines,
                       int64_t expected) {
  ASSERT_GT(expected, 0) << "the tool did not print the line this test looks for";
  EXPECT_EQ(d.root_cause_line, expected);
  EXPECT_THAT(d.evidence,
              Contains(AllOf(Field(&EvidenceLine::line, expected),
                             Field(&EvidenceLine::text, lines[static_cast<size_t>(expected - 1)]))))
      << "the root-cause line is not in the evidence";
}

// Expects every line of the FAILED block at `failed` in the evidence, verbatim.
void ExpectFailedBlockInEvidence(const Diagnosis& d, const std::vector<std::string_view>& lines,
                                 int64_t failed) {
  ASSERT_GT(failed, 0) << "ninja printed no FAILED: line";
  for (const int64_t n : FailedBlock(lines, failed)) {
    EXPECT_THAT(d.evidence,
                Contains(AllOf(Field(&EvidenceLine::line, n),
                               Field(&EvidenceLine::text, lines[static_cast<size_t>(n - 1)]))))
        << "line " << n << " of the FAILED block is missing from the evidence";
  }
}

// Every evidence line number is an elision marker (0) or a line of the log.
void ExpectEvidenceLinesValid(const Diagnosis& d) {
  for (const EvidenceLine& e : d.evidence) {
    EXPECT_TRUE(e.line == 0 || (e.line >= 1 && e.line <= d.lines)) << e.line;
  }
}

// The PTX ISA version this ptxas says it supports ("current version is 'X.Y'"), or "".
std::string SupportedPtxVersion(std::string_view output) {
  constexpr std::string_view kSays = "current version is '";
  const size_t at = output.find(kSays);
  if (at == std::string_view::npos) return "";
  const size_t start = at + kSays.size();
  const size_t end = output.find('\'', start);
  if (end == std::string_view::npos) return "";
  return std::string(output.substr(start, end - start));
}

// --- 1. ptxas given PTX newer than it knows --------------------------------------------------

TEST_F(LiveToolTest, PtxasGivenNewerPtxIsaIsPtxVersionUnsupported) {
  SKIP_UNLESS_TOOLS(kPtxas);
  dir_.WriteFile("kernel.ptx", PtxSource("9.2"));
  absl::StatusOr<RunResult> run =
      RunTool({kPtxas, "-arch=sm_90", "kernel.ptx", "-o", "kernel.cubin"}, "ptxas.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ptxas printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0) << "this ptxas accepts PTX 9.2; the test needs an older one";
  const std::string supported = SupportedPtxVersion(run->output);
  ASSERT_FALSE(supported.empty()) << "ptxas did not say which PTX version it supports";

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ptxas.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"Unsupported .version 9.2"}));
  EXPECT_EQ(d.facts.First("ptx_wanted"), "9.2");
  EXPECT_EQ(d.facts.First("ptx_supported"), supported);
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

TEST_F(LiveToolTest, PtxasStepInsideNinjaBlockBeatsBuildStopped) {
  SKIP_UNLESS_TOOLS(kPtxas, "ninja");
  dir_.WriteFile("kernel.ptx", PtxSource("9.2"));
  absl::StatusOr<RunResult> run = RunNinja(
      "rule ptxas\n"
      "  command = /usr/local/cuda/bin/ptxas -arch=sm_90 $in -o $out\n"
      "build kernel.cubin: ptxas kernel.ptx\n",
      "kernel.cubin", "ninja.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ninja printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);
  const std::string supported = SupportedPtxVersion(run->output);
  ASSERT_FALSE(supported.empty()) << "ptxas did not say which PTX version it supports";

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ninja.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  const int64_t failed = LineContaining(lines, {"FAILED: "});
  const int64_t stopped = LineContaining(lines, {"ninja: build stopped"});
  EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"Unsupported .version 9.2"}));
  ExpectFailedBlockInEvidence(d, lines, failed);
  // ninja's own lines are symptoms, seen and passed over.
  ASSERT_GT(stopped, 0);
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, stopped)));
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, failed)));
  EXPECT_EQ(d.facts.First("ptx_wanted"), "9.2");
  EXPECT_EQ(d.facts.First("ptx_supported"), supported);
  EXPECT_EQ(d.facts.First("ptxas_path"), kPtxas);
  EXPECT_EQ(d.facts.First("gpu_arch"), "sm_90");
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// --- 2. nvcc against the headers of another CUDA release: CCCL's guard -----------------------

// Makes `dir`/include a copy of the CUDA include dir (symlinks to each entry) whose
// cuda_runtime_api.h says CUDART_VERSION is another minor of the same major, and returns that
// version; "" (with a test failure) when the header is not as expected.
std::string MakeMismatchedIncludeDir(const TempDir& dir) {
  namespace fs = std::filesystem;
  const fs::path include(dir.Join("include"));
  fs::create_directories(include);
  for (const fs::directory_entry& entry : fs::directory_iterator(kCudaInclude)) {
    if (entry.path().filename() == "cuda_runtime_api.h") continue;
    fs::create_symlink(entry.path(), include / entry.path().filename());
  }
  // cuda_runtime.h (which nvcc pre-includes) includes "cuda_runtime_api.h" with quotes, so the
  // edited copy must sit beside it: here it does, as the symlink keeps this directory's path.
  const std::string header = ReadFile(absl::StrCat(kCudaInclude, "/cuda_runtime_api.h"));
  constexpr std::string_view kDefine = "#define CUDART_VERSION";
  const size_t at = header.find(kDefine);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no CUDART_VERSION in " << kCudaInclude << "/cuda_runtime_api.h";
    return "";
  }
  const size_t value_start = header.find_first_not_of(' ', at + kDefine.size());
  const size_t value_end = header.find_first_not_of("0123456789", value_start);
  const int version = std::atoi(header.substr(value_start, value_end - value_start).c_str());
  if (version < 1000) {
    ADD_FAILURE() << "unexpected CUDART_VERSION " << version;
    return "";
  }
  // Same major, another minor: 13000 -> 13020.
  const int minor = (version % 1000) / 10;
  const std::string other = std::to_string((version / 1000) * 1000 + (minor == 2 ? 1 : 2) * 10);
  std::string edited = header;
  edited.replace(value_start, value_end - value_start, other);
  dir.WriteFile("include/cuda_runtime_api.h", edited);
  return other;
}

TEST_F(LiveToolTest, NvccWithHeadersOfAnotherCudaIsCudaHeaderMismatch) {
  SKIP_UNLESS_TOOLS(kNvcc);
  ASSERT_FALSE(MakeMismatchedIncludeDir(dir_).empty());
  dir_.WriteFile("kernel.cu", kGoodKernel);
  absl::StatusOr<RunResult> run =
      RunTool({kNvcc, "-Iinclude", "-c", "kernel.cu", "-o", "kernel.o"}, "nvcc.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("nvcc printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);
  // The real CCCL guard fired, not some other error.
  ASSERT_THAT(run->output, HasSubstr("cuda_toolkit.h"));

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("nvcc.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "cuda_header_mismatch");
  ExpectRootCauseAt(d, lines,
                    LineContaining(lines, {"error", "CUDA compiler and CUDA toolkit headers are"}));
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

TEST_F(LiveToolTest, NvccStepWithHeadersOfAnotherCudaInsideNinjaBlock) {
  SKIP_UNLESS_TOOLS(kNvcc, "ninja");
  ASSERT_FALSE(MakeMismatchedIncludeDir(dir_).empty());
  dir_.WriteFile("kernel.cu", kGoodKernel);
  absl::StatusOr<RunResult> run = RunNinja(
      "nvcc = /usr/local/cuda/bin/nvcc\n"
      "cuda_cflags = -DTORCH_EXTENSION_NAME=fleet_live_op -Iinclude -Xcompiler -fPIC "
      "-arch=sm_90\n"
      "rule cuda_compile\n"
      "  command = $nvcc $cuda_cflags -c $in -o $out\n"
      "build kernel.cuda.o: cuda_compile kernel.cu\n",
      "kernel.cuda.o", "ninja.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ninja printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);
  ASSERT_THAT(run->output, HasSubstr("cuda_toolkit.h"));

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ninja.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "cuda_header_mismatch");
  ExpectRootCauseAt(d, lines,
                    LineContaining(lines, {"error", "CUDA compiler and CUDA toolkit headers are"}));
  ExpectFailedBlockInEvidence(d, lines, LineContaining(lines, {"FAILED: "}));
  EXPECT_EQ(d.facts.First("nvcc_path"), kNvcc);
  EXPECT_EQ(d.facts.First("jit_op"), kJitOp);
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// --- 3. a link with -lcuda and no stub dir ----------------------------------------------------

// Whether g++ (in the tool environment) finds libcuda.so on its default link path, where a link
// with -lcuda cannot fail.
bool LibcudaOnDefaultLinkPath(const TempDir& dir) {
  RunOptions options;
  options.env = ToolEnv(dir);
  options.output_path = dir.Join("print-file-name.out");
  absl::StatusOr<RunResult> run =
      fleet::testing::Run({Locate("g++"), "-print-file-name=libcuda.so"}, options);
  // g++ prints the bare name back when it finds no such file.
  return run.ok() && StartsWith(run->output, "/");
}

TEST_F(LiveToolTest, LinkWithLcudaAndNoStubDirIsLinkError) {
  SKIP_UNLESS_TOOLS("g++");
  if (LibcudaOnDefaultLinkPath(dir_)) {
    GTEST_SKIP() << "libcuda.so is on g++'s default link path here: -lcuda cannot fail";
  }
  dir_.WriteFile("main.cc", "int main() { return 0; }\n");
  absl::StatusOr<RunResult> compile =
      RunTool({Locate("g++"), "-c", "main.cc", "-o", "main.o"}, "compile.log");
  ASSERT_TRUE(compile.ok()) << compile.status();
  ASSERT_TRUE(compile->exited && compile->exit_code == 0) << compile->output;
  absl::StatusOr<RunResult> run =
      RunTool({Locate("g++"), "main.o", "-o", "main", "-lcuda"}, "link.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("the link printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("link.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  const int64_t collect2 = LineContaining(lines, {"collect2"});
  EXPECT_EQ(d.diagnosis_class, "link_error");
  // The cannot-find line, not collect2's summary of it.
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"cannot find -lcuda"}));
  ASSERT_GT(collect2, 0) << "g++ did not print collect2's line";
  EXPECT_NE(d.root_cause_line, collect2);
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, collect2)));
  EXPECT_EQ(d.facts.First("link_library"), "-lcuda");
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// A torch-style JIT build.ninja: compile steps, then the link of the op's shared object.
constexpr char kJitBuildNinja[] =
    "ninja_required_version = 1.3\n"
    "cxx = g++\n"
    "nvcc = /usr/local/cuda/bin/nvcc\n"
    "cflags = -DTORCH_EXTENSION_NAME=fleet_live_op -fPIC -O2\n"
    "cuda_cflags = -DTORCH_EXTENSION_NAME=fleet_live_op -Xcompiler -fPIC -arch=sm_90\n"
    "ldflags = -shared -lcuda\n"
    "rule compile\n"
    "  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out\n"
    "  depfile = $out.d\n"
    "  deps = gcc\n"
    "rule cuda_compile\n"
    "  command = $nvcc $cuda_cflags -c $in -o $out\n"
    "rule link\n"
    "  command = $cxx $in $ldflags -o $out\n"
    "build op.o: compile op.cc\n"
    "build broken.o: compile broken.cc\n"
    "build broken.cuda.o: cuda_compile broken.cu\n"
    "build fleet_live_op.so: link op.o\n";

TEST_F(LiveToolTest, NinjaLinkStepWithLcudaAndNoStubDirIsLinkError) {
  SKIP_UNLESS_TOOLS("ninja", "g++");
  if (LibcudaOnDefaultLinkPath(dir_)) {
    GTEST_SKIP() << "libcuda.so is on g++'s default link path here: -lcuda cannot fail";
  }
  dir_.WriteFile("op.cc", "int fleet_live_entry() { return 0; }\n");
  absl::StatusOr<RunResult> run = RunNinja(kJitBuildNinja, "fleet_live_op.so", "ninja.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ninja printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ninja.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  const int64_t failed = LineContaining(lines, {"FAILED: "});
  const int64_t collect2 = LineContaining(lines, {"collect2"});
  const int64_t stopped = LineContaining(lines, {"ninja: build stopped"});
  EXPECT_EQ(d.diagnosis_class, "link_error");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"cannot find -lcuda"}));
  ExpectFailedBlockInEvidence(d, lines, failed);
  ASSERT_GT(collect2, 0);
  ASSERT_GT(stopped, 0);
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, collect2)));
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, stopped)));
  EXPECT_EQ(d.facts.First("link_library"), "-lcuda");
  EXPECT_EQ(d.facts.First("jit_op"), kJitOp);
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// --- 4. a ninja step that fails on a compiler error --------------------------------------------

TEST_F(LiveToolTest, NinjaStepWithGccSyntaxErrorIsJitBuildFailed) {
  SKIP_UNLESS_TOOLS("ninja", "g++");
  dir_.WriteFile("broken.cc", "int fleet_live_entry() { return 1 }\n");
  absl::StatusOr<RunResult> run = RunNinja(kJitBuildNinja, "broken.o", "ninja.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ninja printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ninja.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  const int64_t failed = LineContaining(lines, {"FAILED: "});
  const int64_t stopped = LineContaining(lines, {"ninja: build stopped"});
  EXPECT_EQ(d.diagnosis_class, "jit_build_failed");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"broken.cc:", "error:"}));
  ExpectFailedBlockInEvidence(d, lines, failed);
  ASSERT_GT(stopped, 0);
  EXPECT_THAT(d.symptoms, Contains(Field(&SymptomHit::line, stopped)));
  EXPECT_EQ(d.facts.First("jit_op"), kJitOp);
  // An error in the source: reported, never answered with a toolchain change.
  EXPECT_FALSE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

TEST_F(LiveToolTest, NinjaStepWithNvccSyntaxErrorIsJitBuildFailed) {
  SKIP_UNLESS_TOOLS("ninja", kNvcc);
  dir_.WriteFile("broken.cu", "__global__ void fleet_live_kernel(int* p) { *p = 1 }\n");
  absl::StatusOr<RunResult> run = RunNinja(kJitBuildNinja, "broken.cuda.o", "ninja.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ninja printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ninja.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "jit_build_failed");
  // nvcc's front end says "broken.cu(1): error: ...".
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"broken.cu", "error"}));
  ExpectFailedBlockInEvidence(d, lines, LineContaining(lines, {"FAILED: "}));
  EXPECT_EQ(d.facts.First("nvcc_path"), kNvcc);
  EXPECT_EQ(d.facts.First("gpu_arch"), "sm_90");
  EXPECT_EQ(d.facts.First("jit_op"), kJitOp);
  EXPECT_FALSE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// --- 5. ninja not on PATH ------------------------------------------------------------------------

TEST_F(LiveToolTest, ShellFindsNoNinjaOnPathIsNinjaNotFound) {
  SKIP_UNLESS_TOOLS("/bin/sh");
  // A PATH with one empty directory: nothing to find there.
  dir_.WriteFile("empty-bin/.keep", "");
  Env env = ToolEnv(dir_);
  env["PATH"] = dir_.Join("empty-bin");
  absl::StatusOr<RunResult> run = RunTool({"/bin/sh", "-c", "ninja --version"}, "sh.log", env);
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("the shell printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_EQ(run->exit_code, 127);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("sh.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "ninja_not_found");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"ninja", "not found"}));
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// What a JIT written in Python meets (torch, flashinfer): subprocess finds no ninja.
TEST_F(LiveToolTest, PythonSubprocessFindsNoNinjaIsNinjaNotFound) {
  SKIP_UNLESS_TOOLS("python3");
  dir_.WriteFile("empty-bin/.keep", "");
  Env env = ToolEnv(dir_);
  env["FLEET_PATH_WITHOUT_NINJA"] = dir_.Join("empty-bin");
  absl::StatusOr<RunResult> run =
      RunTool({Locate("python3"), "-c",
               "import os, subprocess\n"
               "subprocess.run(['ninja', '--version'], check=True,\n"
               "               env={'PATH': os.environ['FLEET_PATH_WITHOUT_NINJA']})\n"},
              "python.log", env);
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("python printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("python.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "ninja_not_found");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"FileNotFoundError", "'ninja'"}));
  // The evidence is the whole traceback.
  const int64_t traceback = LineContaining(lines, {"Traceback (most recent call last)"});
  ASSERT_GT(traceback, 0);
  EXPECT_THAT(d.evidence, Contains(Field(&EvidenceLine::line, traceback)));
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// --- 6. nvcc not where CUDA_HOME says
// --------------------------------------------------------------

TEST_F(LiveToolTest, ShellFindsNoNvccUnderWrongCudaHomeIsNvccNotFound) {
  SKIP_UNLESS_TOOLS("/bin/sh");
  Env env = ToolEnv(dir_);
  env["CUDA_HOME"] = dir_.Join("nonexistent/cuda");
  const std::string nvcc_path = dir_.Join("nonexistent/cuda/bin/nvcc");
  // The command is a fixed string; the path comes in through the environment.
  absl::StatusOr<RunResult> run =
      RunTool({"/bin/sh", "-c", "\"$CUDA_HOME/bin/nvcc\" --version"}, "sh.log", env);
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("the shell printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_EQ(run->exit_code, 127);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("sh.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "nvcc_not_found");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {nvcc_path, "not found"}));
  EXPECT_EQ(d.facts.First("nvcc_path"), nvcc_path);
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// torch.utils.cpp_extension runs os.path.join(CUDA_HOME, 'bin', 'nvcc') the same way.
TEST_F(LiveToolTest, PythonSubprocessFindsNoNvccUnderWrongCudaHomeIsNvccNotFound) {
  SKIP_UNLESS_TOOLS("python3");
  Env env = ToolEnv(dir_);
  env["CUDA_HOME"] = dir_.Join("nonexistent/cuda");
  const std::string nvcc_path = dir_.Join("nonexistent/cuda/bin/nvcc");
  absl::StatusOr<RunResult> run =
      RunTool({Locate("python3"), "-c",
               "import os, subprocess\n"
               "subprocess.check_output([os.path.join(os.environ['CUDA_HOME'], 'bin', 'nvcc'), "
               "'--version'])\n"},
              "python.log", env);
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("python printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0);

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("python.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "nvcc_not_found");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"FileNotFoundError", nvcc_path}));
  EXPECT_EQ(d.facts.First("nvcc_path"), nvcc_path);
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

// --- 7. an arch the compiler does not know
// --------------------------------------------------------

TEST_F(LiveToolTest, NvccGivenUnknownArchIsUnsupportedGpuArch) {
  SKIP_UNLESS_TOOLS(kNvcc);
  dir_.WriteFile("kernel.cu", kGoodKernel);
  absl::StatusOr<RunResult> run =
      RunTool({kNvcc, "-arch=sm_200", "-c", "kernel.cu", "-o", "kernel.o"}, "nvcc.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("nvcc printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0) << "this nvcc knows sm_200; the test needs an arch it does not";

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("nvcc.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "unsupported_gpu_arch");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"nvcc", "sm_200"}));
  EXPECT_EQ(d.facts.First("gpu_arch"), "sm_200");
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

TEST_F(LiveToolTest, PtxasGivenUnknownArchIsUnsupportedGpuArch) {
  SKIP_UNLESS_TOOLS(kPtxas);
  dir_.WriteFile("kernel.ptx", PtxSource("8.0"));
  absl::StatusOr<RunResult> run =
      RunTool({kPtxas, "-arch=sm_200", "kernel.ptx", "-o", "kernel.cubin"}, "ptxas.log");
  ASSERT_TRUE(run.ok()) << run.status();
  SCOPED_TRACE(absl::StrCat("ptxas printed:\n", run->output));
  ASSERT_TRUE(run->exited);
  ASSERT_NE(run->exit_code, 0) << "this ptxas knows sm_200; the test needs an arch it does not";

  Diagnosis d;
  ASSERT_NO_FATAL_FAILURE(Classify("ptxas.log", &d));
  const std::vector<std::string_view> lines = SplitLines(run->output);
  EXPECT_EQ(d.diagnosis_class, "unsupported_gpu_arch");
  ExpectRootCauseAt(d, lines, LineContaining(lines, {"ptxas", "sm_200"}));
  EXPECT_EQ(d.facts.First("gpu_arch"), "sm_200");
  EXPECT_TRUE(d.toolchain_fix);
  ExpectEvidenceLinesValid(d);
}

}  // namespace
}  // namespace fleet::diagnosis

#include "cli/explain_command.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::cli {
namespace {

using ::fleet::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome ExplainFiles(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunExplain(args, /*stdout_is_tty=*/false, out, err);
  return {code, out.str(), err.str()};
}

TEST(ExplainCommand, JsonLinesOneObjectPerFile) {
  TempDir dir;
  dir.WriteFile("a.log", "ImportError: libnvrtc.so.13: cannot open shared object file: x\n");
  dir.WriteFile("b.log", "all fine\n");
  const Outcome o = ExplainFiles({"-o", "json", dir.Join("a.log"), dir.Join("b.log")});
  EXPECT_EQ(o.code, 0) << o.err;
  std::istringstream lines(o.out);
  std::string first, second, extra;
  ASSERT_TRUE(std::getline(lines, first));
  ASSERT_TRUE(std::getline(lines, second));
  EXPECT_FALSE(std::getline(lines, extra));
  EXPECT_THAT(first, StartsWith("{\"file\":\"" + dir.Join("a.log") +
                                "\",\"class\":\"missing_shared_library\",\"root_cause_line\":1,"));
  EXPECT_THAT(second, HasSubstr("\"class\":\"none\",\"root_cause_line\":0,"));
}

TEST(ExplainCommand, UnreadableFileExitsTwoAndOthersAreStillReported) {
  TempDir dir;
  dir.WriteFile("a.log", "collect2: error: ld returned 1 exit status\n");
  const Outcome o =
      ExplainFiles({"-o", "json", dir.Join("missing.log"), dir.Join("a.log"), dir.path()});
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.err, HasSubstr("missing.log: open: No such file or directory"));
  EXPECT_THAT(o.err, HasSubstr("is a directory"));
  EXPECT_THAT(o.out, HasSubstr("\"class\":\"link_error\""));
}

TEST(ExplainCommand, UsageErrorsExitOne) {
  EXPECT_EQ(ExplainFiles({}).code, 1);
  EXPECT_EQ(ExplainFiles({"-o", "yaml", "x"}).code, 1);
  EXPECT_EQ(ExplainFiles({"--bogus", "x"}).code, 1);
  const Outcome help = ExplainFiles({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: fleetctl explain"));
}

TEST(ExplainCommand, BadCatalogueNamesFileAndLine) {
  TempDir dir;
  dir.WriteFile("sig.conf", "[x]\nrole = root_cause\nclass = nope\n");
  dir.WriteFile("a.log", "x\n");
  const Outcome o = ExplainFiles({"--signatures", dir.Join("sig.conf"), dir.Join("a.log")});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr(dir.Join("sig.conf") + ":3: field 'class'"));
}

TEST(ExplainCommand, ConfidenceFieldOnlyWithTheFlagAndALowOneIsSaid) {
  TempDir dir;
  dir.WriteFile("sig.conf",
                "[stem]\nrole = root_cause\nclass = link_error\npattern = cannot fnd -l\n"
                "confidence = low\n");
  dir.WriteFile("a.log", "ld: cannot fnd -lcuda\n");
  const std::string sig = dir.Join("sig.conf"), log = dir.Join("a.log");
  const Outcome plain = ExplainFiles({"-o", "json", "--signatures", sig, log});
  EXPECT_EQ(plain.code, 0) << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("\"toolchain_fix\":false}\n"));
  const Outcome with = ExplainFiles({"-o", "json", "--confidence", "--signatures", sig, log});
  EXPECT_EQ(with.out, plain.out.substr(0, plain.out.size() - 2) + ",\"confidence\":\"low\"}\n");
  const Outcome text = ExplainFiles({"--signatures", sig, log});
  EXPECT_THAT(text.out, HasSubstr("link_error\n  cause: "));
  EXPECT_THAT(text.out, HasSubstr("\n  confidence: low (inferred"));
}

TEST(ExplainCommand, HumanReportShowsEvidence) {
  TempDir dir;
  dir.WriteFile("a.log",
                "FAILED: [code=1] x.o\nptxas fatal   : Unsupported .version 9.2; current version "
                "is '9.0'\nninja: build stopped: subcommand failed.\n");
  const Outcome o = ExplainFiles({dir.Join("a.log")});
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, HasSubstr("ptx_version_unsupported"));
  EXPECT_THAT(o.out, HasSubstr("ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2"));
  EXPECT_THAT(o.out, HasSubstr("  > 2  ptxas fatal"));
  EXPECT_THAT(o.out, HasSubstr("in ninja_failed 1-3"));
}

// The real binary: standard input, --version, --help and the exit codes a script sees.
TEST(FleetctlBinary, ReadsStandardInputAndReportsVersion) {
  TempDir dir;
  dir.WriteFile("in.log", "nvcc fatal   : Unsupported gpu architecture 'compute_120f'\n");
  auto r =
      fleet::testing::Run({fleet::testing::BuildPath("cli/fleetctl"), "explain", "-o", "json", "-"},
                          {.output_path = dir.Join("out"), .stdin_path = dir.Join("in.log")});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_THAT(r->output, HasSubstr("{\"file\":\"-\",\"class\":\"unsupported_gpu_arch\""));

  auto v = fleet::testing::Run({fleet::testing::BuildPath("cli/fleetctl"), "--version"},
                               {.output_path = dir.Join("version")});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->exit_code, 0);
  EXPECT_THAT(v->output, StartsWith("fleetctl 0."));

  auto u = fleet::testing::Run({fleet::testing::BuildPath("cli/fleetctl"), "frobnicate"},
                               {.output_path = dir.Join("u")});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->exit_code, 1);
  EXPECT_THAT(u->output, HasSubstr("unknown verb 'frobnicate'"));
}

TEST(OtherBinaries, HaveHelpAndVersion) {
  TempDir dir;
  for (const std::string bin : {"agent/fleet-agent", "daemon/fleetd"}) {
    auto v = fleet::testing::Run({fleet::testing::BuildPath(bin), "--version"},
                                 {.output_path = dir.Join("v")});
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->exit_code, 0) << bin;
    auto h = fleet::testing::Run({fleet::testing::BuildPath(bin), "--help"},
                                 {.output_path = dir.Join("h")});
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->exit_code, 0) << bin;
    EXPECT_THAT(h->output, HasSubstr("usage:"));
  }
}

}  // namespace
}  // namespace fleet::cli

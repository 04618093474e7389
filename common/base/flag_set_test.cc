#include "common/base/flag_set.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FlagSet, ParsesLongShortInlineAndPositional) {
  std::string output = "table";
  bool watch = false;
  int64_t attempt = 0;
  std::vector<std::string> only;
  FlagSet flags("t [flags] FILE...", "");
  flags.AddString("output", 'o', &output, "output format");
  flags.AddBool("watch", 'w', &watch, "watch");
  flags.AddInt("attempt", '\0', &attempt, "attempt");
  flags.AddRepeated("only", '\0', &only, "only");
  ASSERT_TRUE(flags
                  .Parse({"a.log", "-o", "json", "--watch", "--attempt=3", "--only", "x",
                          "--only=y", "-", "--", "--not-a-flag"})
                  .ok());
  EXPECT_EQ(output, "json");
  EXPECT_TRUE(watch);
  EXPECT_EQ(attempt, 3);
  EXPECT_THAT(only, ElementsAre("x", "y"));
  EXPECT_THAT(flags.positional(), ElementsAre("a.log", "-", "--not-a-flag"));
}

TEST(FlagSet, GluedShortValue) {
  std::string output;
  FlagSet flags("t", "");
  flags.AddString("output", 'o', &output, "output format");
  ASSERT_TRUE(flags.Parse({"-ojson"}).ok());
  EXPECT_EQ(output, "json");
}

TEST(FlagSet, RejectsUnknownFlagNamingIt) {
  FlagSet flags("t", "");
  absl::Status s = flags.Parse({"--bogus"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--bogus"));
}

TEST(FlagSet, RejectsMissingAndMalformedValues) {
  int64_t n = 0;
  bool b = false;
  FlagSet flags("t", "");
  flags.AddInt("attempt", '\0', &n, "attempt");
  flags.AddBool("watch", '\0', &b, "watch");
  EXPECT_FALSE(flags.Parse({"--attempt"}).ok());
  EXPECT_FALSE(flags.Parse({"--attempt=three"}).ok());
  EXPECT_FALSE(flags.Parse({"--watch=maybe"}).ok());
  EXPECT_TRUE(flags.Parse({"--watch=false"}).ok());
  EXPECT_FALSE(b);
}

TEST(FlagSet, HelpListsFlagsAndDefaults) {
  std::string output = "table";
  FlagSet flags("fleetctl explain FILE...", "Explains logs.");
  flags.AddString("output", 'o', &output, "output format", "FORMAT");
  ASSERT_TRUE(flags.Parse({"--help"}).ok());
  EXPECT_TRUE(flags.help_requested());
  const std::string help = flags.Help();
  EXPECT_THAT(help, HasSubstr("usage: fleetctl explain FILE..."));
  EXPECT_THAT(help, HasSubstr("-o, --output FORMAT"));
  EXPECT_THAT(help, HasSubstr("(default: table)"));
}

}  // namespace
}  // namespace fleet

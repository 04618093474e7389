#include "common/config/placeholders.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::config {
namespace {

using ::testing::ElementsAre;

const PlaceholderValues kValues{.gpu = "3", .port = "30003", .log = "/l/3.log", .model = "/m"};

TEST(Placeholders, ExpandsTheFourNames) {
  EXPECT_EQ(*ExpandPlaceholders("--port={port}", kValues), "--port=30003");
  EXPECT_EQ(*ExpandPlaceholders("{model}:{gpu}:{log}:{gpu}", kValues), "/m:3:/l/3.log:3");
  EXPECT_EQ(*ExpandPlaceholders("plain", kValues), "plain");
  EXPECT_EQ(*ExpandPlaceholders("", kValues), "");
}

TEST(Placeholders, LeavesBracesThatAreNotPlaceholdersAlone) {
  const std::string json = R"({"rope_type": "yarn", "factor": 4.0})";
  EXPECT_EQ(*ExpandPlaceholders(json, kValues), json);
  EXPECT_EQ(*ExpandPlaceholders("{} { gpu} {1x} {gpu", kValues), "{} { gpu} {1x} {gpu");
  EXPECT_EQ(*ExpandPlaceholders("{{gpu}}", kValues), "{3}");
}

TEST(Placeholders, RejectsUnknownNamesWithASuggestion) {
  absl::StatusOr<std::string> r = ExpandPlaceholders("--x={gpus}", kValues);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "unknown placeholder '{gpus}' (did you mean '{gpu}'?); known: {gpu} {port} {log} "
            "{model}");
  EXPECT_EQ(ExpandPlaceholders("{home}", kValues).status().message(),
            "unknown placeholder '{home}'; known: {gpu} {port} {log} {model}");
}

TEST(Placeholders, ListsTheNamesUsed) {
  EXPECT_THAT(PlaceholdersIn("{gpu}-{x}-{gpu} {\"a\": 1}"), ElementsAre("gpu", "x", "gpu"));
}

}  // namespace
}  // namespace fleet::config

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
  absl::StatusOr<std::string> r = ExpandPlaceholders("--x={prot}", kValues);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "unknown placeholder '{prot}' (did you mean '{port}'?); known: {gpu} {port} {log} "
            "{model} {gpus} {gpu_count}");
  EXPECT_EQ(ExpandPlaceholders("{home}", kValues).status().message(),
            "unknown placeholder '{home}'; known: {gpu} {port} {log} {model} {gpus} {gpu_count}");
}

TEST(Placeholders, ATensorParallelServerHasItsGpusAndTheirCount) {
  const PlaceholderValues tp = ServerPlaceholders({4, 5}, 30004, "/m");
  EXPECT_EQ(*ExpandPlaceholders("-tp {gpu_count} on {gpus}, lead {gpu}, port {port}", tp),
            "-tp 2 on 4,5, lead 4, port 30004");
  const PlaceholderValues one = ServerPlaceholders({3}, 30003, "/m");
  EXPECT_EQ(*ExpandPlaceholders("{gpus}/{gpu_count}/{gpu}/{model}", one), "3/1/3//m");
}

TEST(Placeholders, ListsTheNamesUsed) {
  EXPECT_THAT(PlaceholdersIn("{gpu}-{x}-{gpu} {\"a\": 1}"), ElementsAre("gpu", "x", "gpu"));
}

}  // namespace
}  // namespace fleet::config

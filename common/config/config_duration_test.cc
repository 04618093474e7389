#include "common/config/config_duration.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::config {
namespace {

using ::testing::HasSubstr;

TEST(ConfigDuration, ReadsUnitsAndPlainSeconds) {
  EXPECT_EQ(*ParseConfigDuration("10m"), absl::Minutes(10));
  EXPECT_EQ(*ParseConfigDuration("90s"), absl::Seconds(90));
  EXPECT_EQ(*ParseConfigDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseConfigDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseConfigDuration("30"), absl::Seconds(30));
  EXPECT_EQ(*ParseConfigDuration("1.5"), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseConfigDuration("0"), absl::ZeroDuration());
}

TEST(ConfigDuration, RejectsNegativeInfiniteAndWords) {
  for (const char* text : {"", "10 minutes", "abc", "1d", "inf", "nan", "1e400", "5 s"}) {
    absl::StatusOr<absl::Duration> d = ParseConfigDuration(text);
    EXPECT_FALSE(d.ok()) << text;
    EXPECT_THAT(d.status().message(), HasSubstr("expected a duration")) << text;
  }
  EXPECT_THAT(ParseConfigDuration("-5s").status().message(), HasSubstr("cannot be negative"));
  EXPECT_THAT(ParseConfigDuration("-1").status().message(), HasSubstr("cannot be negative"));
}

TEST(ConfigDuration, ConvertsToAndFromProto) {
  const google::protobuf::Duration d = ToProtoDuration(absl::Milliseconds(90500));
  EXPECT_EQ(d.seconds(), 90);
  EXPECT_EQ(d.nanos(), 500'000'000);
  EXPECT_EQ(FromProtoDuration(d), absl::Milliseconds(90500));
  EXPECT_EQ(FormatConfigDuration(ToProtoDuration(absl::Minutes(90))), "1h30m");
}

}  // namespace
}  // namespace fleet::config

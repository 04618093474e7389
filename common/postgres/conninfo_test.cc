#include "common/postgres/conninfo.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::postgres {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RedactConninfo, HidesThePasswordOfAUri) {
  const std::string redacted =
      RedactConninfo("postgresql://fleet:s3cr%40t@db.example:5433/fleet?sslmode=require");
  EXPECT_THAT(redacted, Not(HasSubstr("s3cr")));
  EXPECT_THAT(redacted, HasSubstr("password=****"));
  EXPECT_THAT(redacted, HasSubstr("host=db.example"));
  EXPECT_THAT(redacted, HasSubstr("port=5433"));
  EXPECT_THAT(redacted, HasSubstr("user=fleet"));
  EXPECT_THAT(redacted, HasSubstr("sslmode=require"));
}

TEST(RedactConninfo, HidesPasswordsInQueryAndKeyValueForms) {
  EXPECT_THAT(RedactConninfo("postgresql:///fleet?host=/run/pg&password=hunter2"),
              Not(HasSubstr("hunter2")));
  EXPECT_THAT(
      RedactConninfo("host=/run/pg dbname=fleet password='hun ter\\'2' "
                     "sslpassword=keypass"),
      AllOf(Not(HasSubstr("hun ter")), Not(HasSubstr("keypass")), HasSubstr("dbname=fleet")));
}

TEST(RedactConninfo, ShowsNothingOfAStringLibpqCannotParse) {
  const std::string redacted = RedactConninfo("postgresql://fleet:hunter2@host:notaport/x?bad");
  EXPECT_THAT(redacted, Not(HasSubstr("hunter2")));
  EXPECT_THAT(RedactConninfo("password='unterminated"), Not(HasSubstr("unterminated")));
}

TEST(ConninfoSecrets, FindsThePasswordsAndScrubsThem) {
  const std::vector<std::string> secrets =
      ConninfoSecrets("postgresql://fleet:s3cr%40t@/fleet?host=/x&sslpassword=kp");
  EXPECT_THAT(secrets, ::testing::UnorderedElementsAre("s3cr@t", "kp"));
  EXPECT_EQ(ScrubSecrets("auth for s3cr@t failed", secrets), "auth for **** failed");
}

}  // namespace
}  // namespace fleet::postgres

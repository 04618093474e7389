#include "common/postgres/placeholders.h"

#include "gtest/gtest.h"

namespace fleet::postgres {
namespace {

std::string Translate(std::string_view sql, int* count = nullptr) {
  absl::StatusOr<TranslatedSql> t = TranslatePlaceholders(sql);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  if (count != nullptr) *count = t->param_count;
  return t->sql;
}

TEST(TranslatePlaceholders, NumbersBareMarksInOrder) {
  int count = 0;
  EXPECT_EQ(Translate("INSERT INTO t (a, b, c) VALUES (?, ?, ?)", &count),
            "INSERT INTO t (a, b, c) VALUES ($1, $2, $3)");
  EXPECT_EQ(count, 3);
}

TEST(TranslatePlaceholders, KeepsSqliteNumbersAndCountsTheLargest) {
  int count = 0;
  EXPECT_EQ(Translate("SELECT id, ?2, ?3 FROM hosts WHERE name = ?1", &count),
            "SELECT id, $2, $3 FROM hosts WHERE name = $1");
  EXPECT_EQ(count, 3);
  // As SQLite numbers it: a bare ? after ?5 is ?6.
  EXPECT_EQ(Translate("SELECT ?5, ?", &count), "SELECT $5, $6");
  EXPECT_EQ(count, 6);
}

TEST(TranslatePlaceholders, LeavesLiteralsIdentifiersAndCommentsAlone) {
  int count = 0;
  EXPECT_EQ(Translate("SELECT '?', 'it''s ?', ? -- why?\n", &count),
            "SELECT '?', 'it''s ?', $1 -- why?\n");
  EXPECT_EQ(count, 1);
  EXPECT_EQ(Translate("SELECT \"a?\" FROM t WHERE x = ? /* ? /* nested ? */ ? */", &count),
            "SELECT \"a?\" FROM t WHERE x = $1 /* ? /* nested ? */ ? */");
  EXPECT_EQ(count, 1);
  EXPECT_EQ(Translate("SELECT E'\\'?', ?", &count), "SELECT E'\\'?', $1");
  EXPECT_EQ(Translate("SELECT $tag$ it's ? $tag$, $$?$$, ?", &count),
            "SELECT $tag$ it's ? $tag$, $$?$$, $1");
  EXPECT_EQ(count, 1);
  // Not an E'' string: the backslash is an ordinary character and '' the only escape.
  EXPECT_EQ(Translate("SELECT '\\', ?"), "SELECT '\\', $1");
}

TEST(TranslatePlaceholders, PostgresNumbersPassThrough) {
  int count = 0;
  EXPECT_EQ(Translate("SELECT $2 + $1, a$1b FROM t", &count), "SELECT $2 + $1, a$1b FROM t");
  EXPECT_EQ(count, 2);
}

TEST(TranslatePlaceholders, RefusesZeroAndHugeNumbers) {
  EXPECT_EQ(TranslatePlaceholders("SELECT ?0").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TranslatePlaceholders("SELECT ?99999999999").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fleet::postgres

#include "cli/status_format.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "cli/server_table.h"
#include "cli/text_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fleet::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1800000000);  // 2027-01-15T08:00:00Z

v1::ServerRow Row(const std::string& server, const std::string& state) {
  v1::ServerRow row;
  row.set_server(server);
  row.set_state(state);
  row.set_attempt_number(2);
  row.set_port(30003);
  ToProtoTime(kNow - absl::Seconds(75), row.mutable_attempt_started_at());
  ToProtoTime(kNow - absl::Seconds(5), row.mutable_state_since());
  return row;
}

TEST(StatusFormat, AgesAreShort) {
  EXPECT_EQ(FormatAge(absl::Seconds(-3)), "0s");
  EXPECT_EQ(FormatAge(absl::Seconds(42)), "42s");
  EXPECT_EQ(FormatAge(absl::Seconds(192)), "3m12s");
  EXPECT_EQ(FormatAge(absl::Minutes(64)), "1h04m");
  EXPECT_EQ(FormatAge(absl::Hours(51)), "2d03h");
}

TEST(StatusFormat, ProgressBarOnlyWhileJitCompiling) {
  v1::ServerRow row = Row("pve1/200/gpu3", "JIT_COMPILING");
  row.set_progress_step(12);
  row.set_progress_total(40);
  EXPECT_EQ(ProgressCell(row), "[###.......] 12/40");
  row.set_progress_step(40);
  EXPECT_EQ(ProgressCell(row), "[##########] 40/40");
  row.set_progress_total(0);
  EXPECT_EQ(ProgressCell(row), "");
  row.set_state("LOADING");
  row.set_progress_total(40);
  EXPECT_EQ(ProgressCell(row), "");
}

TEST(StatusFormat, TableHasTheColumnsAndCells) {
  v1::ServerRow jit = Row("pve1/200/gpu3", "JIT_COMPILING");
  jit.set_phase_detail("flashinfer JIT");
  jit.set_progress_step(12);
  jit.set_progress_total(40);
  v1::ServerRow failed = Row("pve1/200/gpu10", "GAVE_UP");
  failed.set_last_diagnosis_class("ptx_version_unsupported");
  failed.set_last_diagnosis_summary("ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2");
  failed.set_reason("no fix known");
  const std::string table =
      FormatStatusTable({&jit, &failed}, TableStyle::kNormal, kNow, /*color=*/false);
  EXPECT_EQ(table,
            "SERVER          STATE          PHASE           PROGRESS            ELAPSED  ATTEMPT  "
            "DIAGNOSIS\n"
            "pve1/200/gpu3   JIT_COMPILING  flashinfer JIT  [###.......] 12/40  1m15s    2        "
            "-\n"
            "pve1/200/gpu10  GAVE_UP        -               -                   1m15s    2        "
            "ptx_version_unsupported\n");
  const std::string wide = FormatStatusTable({&failed}, TableStyle::kWide, kNow, false);
  EXPECT_THAT(wide, HasSubstr("PORT   SINCE  SUMMARY"));
  EXPECT_THAT(wide, HasSubstr("30003  5s     ptxas accepts PTX ISA up to 9.0 but was given PTX "
                              "9.2  no fix known\n"));
}

TEST(StatusFormat, ColourOnlyWhenAskedAndOnlyOnTheState) {
  v1::ServerRow ready = Row("local/200/gpu0", "READY");
  const std::string plain = FormatStatusTable({&ready}, TableStyle::kNormal, kNow, false);
  EXPECT_THAT(plain, Not(HasSubstr("\x1b[")));
  const std::string colored = FormatStatusTable({&ready}, TableStyle::kNormal, kNow, true);
  EXPECT_THAT(colored, HasSubstr("\x1b[32mREADY\x1b[0m"));
}

TEST(StatusFormat, ChangeLineIsLogfmt) {
  v1::ServerRow row = Row("pve1/200/gpu3", "JIT_COMPILING");
  row.set_phase_detail("flashinfer JIT");
  row.set_progress_step(12);
  row.set_progress_total(40);
  EXPECT_EQ(FormatChangeLine(kNow + absl::Milliseconds(250), row),
            "2027-01-15T08:00:00Z pve1/200/gpu3 JIT_COMPILING phase=\"flashinfer JIT\" "
            "progress=12/40 attempt=2");
  v1::ServerRow gave_up = Row("pve1/200/gpu4", "GAVE_UP");
  gave_up.set_last_diagnosis_class("cuda_out_of_memory");
  gave_up.set_reason("report only: \"OOM\"");
  EXPECT_EQ(FormatChangeLine(kNow, gave_up),
            "2027-01-15T08:00:00Z pve1/200/gpu4 GAVE_UP attempt=2 diagnosis=cuda_out_of_memory "
            "reason=\"report only: \\\"OOM\\\"\"");
  EXPECT_EQ(FormatRemovedLine(kNow, "pve1/200/gpu4"), "2027-01-15T08:00:00Z pve1/200/gpu4 REMOVED");
}

TEST(StatusFormat, RowJsonHasEveryFieldWithStableNamesAndTypes) {
  v1::ServerRow row = Row("pve1/200/gpu3", "READY");
  row.set_degraded(true);
  row.clear_state_since();
  EXPECT_EQ(StatusJson(kNow, {&row}, {"pve1/200/gpu9"}),
            "{\"at\":\"2027-01-15T08:00:00Z\",\"servers\":[{\"server\":\"pve1/200/gpu3\","
            "\"state\":\"READY\",\"phase_detail\":\"\",\"progress_step\":0,\"progress_total\":0,"
            "\"attempt_number\":2,\"state_since\":null,\"attempt_started_at\":"
            "\"2027-01-15T07:58:45Z\",\"last_diagnosis_class\":\"\",\"last_diagnosis_summary\":"
            "\"\",\"port\":30003,\"degraded\":true,\"reason\":\"\"}],\"removed\":"
            "[\"pve1/200/gpu9\"]}");
  EXPECT_EQ(StatusJson(std::nullopt, {}, {}), "{\"at\":null,\"servers\":[],\"removed\":[]}");
}

TEST(StatusFormat, TheStreamedJsonIsTheWholeObjectsDumpAtAnySize) {
  // Enough rows to cross the writer's flushes, with strings that need escaping or repair.
  std::vector<v1::ServerRow> held;
  for (int i = 0; i < 3000; ++i) {
    v1::ServerRow row = Row(absl::StrCat("pve1/", 200 + i / 8, "/gpu", i % 8),
                            i % 3 == 0 ? "JIT_COMPILING" : "READY");
    row.set_reason(i % 7 == 0 ? "bad \xff\xfe utf-8, \b \f \x7f \"quoted\"" : "");
    row.set_last_diagnosis_summary(i % 5 == 0 ? "line one\nline two\ttab" : "");
    held.push_back(std::move(row));
  }
  std::vector<const v1::ServerRow*> rows;
  for (const v1::ServerRow& row : held) rows.push_back(&row);
  const std::vector<std::string> removed = {"pve1/9/gpu0", "odd \x80 name"};

  Json whole = Json::object();
  whole["at"] = FormatRfc3339(kNow);
  whole["servers"] = Json::array();
  for (const v1::ServerRow* row : rows) whole["servers"].push_back(ServerRowJson(*row));
  whole["removed"] = removed;
  const std::string expected = JsonText(std::move(whole));
  ASSERT_GT(expected.size(), 3u * 65536u);

  EXPECT_EQ(StatusJson(kNow, rows, removed), expected);
  std::ostringstream streamed;
  WriteStatusJson(kNow, rows, removed, streamed);
  EXPECT_EQ(streamed.str(), expected);
}

TEST(TextTable, CutsLinesToTheWidthWithoutBreakingColour) {
  TextTable table({"A", "B"});
  table.AddRow({TextTable::Cell("READY", "\x1b[32m"), "0123456789"});
  EXPECT_EQ(table.Render(false, 10), "A      B\nREADY  012\n");
  EXPECT_EQ(table.Render(true, 3), "A\n\x1b[32mREA\x1b[0m\n");
  EXPECT_EQ(DisplayWidth("gpu\xc3\xa9"), 4u);
}

TEST(ServerTable, MergesByNameAndReportsOnlyRealChanges) {
  ServerTable table;
  v1::FleetStatusResponse first;
  *first.add_servers() = Row("a/1/gpu0", "LOADING");
  *first.add_servers() = Row("a/1/gpu1", "LOADING");
  EXPECT_EQ(table.Apply(first).changed.size(), 2u);
  // The whole table again with one row changed: one change.
  first.mutable_servers(1)->set_state("READY");
  ServerTable::Update update = table.Apply(first);
  ASSERT_EQ(update.changed.size(), 1u);
  EXPECT_EQ(update.changed[0]->server(), "a/1/gpu1");
  v1::FleetStatusResponse removal;
  removal.add_removed("a/1/gpu0");
  removal.add_removed("a/1/gpu7");  // never held: ignored
  update = table.Apply(removal);
  EXPECT_THAT(update.removed, ::testing::ElementsAre("a/1/gpu0"));
  ASSERT_EQ(table.rows().size(), 1u);
  EXPECT_EQ(table.rows()[0]->server(), "a/1/gpu1");
}

TEST(ServerTable, ReadinessForUntilReady) {
  auto evaluate = [](std::vector<std::string> states) {
    ServerTable table;
    v1::FleetStatusResponse m;
    int i = 0;
    for (const std::string& s : states) *m.add_servers() = Row("a/1/gpu" + std::to_string(i++), s);
    table.Apply(m);
    return table.Evaluate();
  };
  using R = ServerTable::Readiness;
  EXPECT_EQ(evaluate({}), R::kWaiting);
  EXPECT_EQ(evaluate({"READY", "JIT_COMPILING"}), R::kWaiting);
  EXPECT_EQ(evaluate({"READY", "FAILED"}), R::kWaiting);
  EXPECT_EQ(evaluate({"READY", "READY"}), R::kReady);
  EXPECT_EQ(evaluate({"READY", "STOPPED"}), R::kReady);
  EXPECT_EQ(evaluate({"READY", "GAVE_UP", "LOADING"}), R::kGaveUp);
  EXPECT_EQ(evaluate({"STOPPED"}), R::kAllStopped);
}

}  // namespace
}  // namespace fleet::cli

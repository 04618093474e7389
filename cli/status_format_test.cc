#include "cli/status_format.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/server_table.h"
#include "cli/text_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_test_data.h"

namespace fleet::cli {
namespace {

using fleet::cli::testing::kFlashinferOp;
using fleet::cli::testing::kNow;

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

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

TEST(StatusFormat, ProgressBarOnlyWhileAStartPhaseCountsSteps) {
  v1::ServerRow row = Row("pve1/200/gpu3", "JIT_COMPILING");
  row.set_progress_step(12);
  row.set_progress_total(40);
  EXPECT_EQ(ProgressCell(row), "[###.......] 12/40");
  row.set_progress_step(40);
  EXPECT_EQ(ProgressCell(row), "[##########] 40/40");
  row.set_progress_total(0);
  EXPECT_EQ(ProgressCell(row), "");
  // Weight shards while the weights load.
  row.set_state("LOADING");
  row.set_progress_step(1);
  row.set_progress_total(4);
  EXPECT_EQ(ProgressCell(row), "[##........] 1/4");
  // Past the start phases nothing counts steps.
  for (const char* state : {"READY", "FAILED", "RESTARTING"}) {
    row.set_state(state);
    EXPECT_EQ(ProgressCell(row), "") << state;
  }
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
  EXPECT_THAT(wide, HasSubstr("PORT   GPUS  SINCE  SUMMARY"));
  EXPECT_THAT(wide,
              HasSubstr("30003  10    5s     ptxas accepts PTX ISA up to 9.0 but was given PTX "
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
            "\"\",\"port\":30003,\"gpus\":[3],\"degraded\":true,\"reason\":\"\"}],\"removed\":"
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

TEST(TextTable, ElidesTheMiddleOfShrinkableColumnsBeforeCutting) {
  EXPECT_EQ(ElideMiddle("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(ElideMiddle("abcdefghij", 6), "abc\xe2\x80\xa6ij");
  EXPECT_EQ(ElideMiddle("abcdefghij", 1), "\xe2\x80\xa6");
  EXPECT_EQ(ElideMiddle("abcdefghij", 0), "");
  EXPECT_EQ(ElideEnd("abcdefghij", 6), "abcde\xe2\x80\xa6");
  EXPECT_EQ(ElideEnd("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(ElideMiddle("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 3), "\xc3\xa9\xe2\x80\xa6\xc3\xa9");

  TextTable table({"NAME", "LONG", "N"});
  table.AddRow({"a", "0123456789abcdef", "42"});
  table.SetShrinkOrder({{1, 6}});
  // 4 + 2 + 16 + 2 + 2 = 26 wide; at 17 LONG gives up 9 characters and N stays whole.
  EXPECT_EQ(table.Render(false, 17),
            "NAME  LONG     N\n"
            "a     012\xe2\x80\xa6"
            "def  42\n");
  // Below LONG's minimum the rest is cut at the right edge, as without a shrink order.
  EXPECT_EQ(table.Render(false, 12),
            "NAME  LONG\na     012\xe2\x80\xa6"
            "ef\n");
  // No limit: whole.
  EXPECT_THAT(table.Render(false), HasSubstr("0123456789abcdef  42"));

  TextTable narrow({"P"});
  TextTable::Cell cell("[#####.....] 12/40");
  cell.narrow = "12/40";
  narrow.AddRow({std::move(cell)});
  narrow.SetShrinkOrder({{0, 5}});
  EXPECT_EQ(narrow.Render(false, 8), "P\n12/40\n");
}

// The canary's JIT phase as flashinfer names it: 175 characters.

std::vector<v1::ServerRow> CanaryFleet() {
  std::vector<v1::ServerRow> rows;
  v1::ServerRow jit = Row("pve1/200/gpu0", "JIT_COMPILING");
  jit.set_phase_detail(kFlashinferOp);
  jit.set_progress_step(30);
  jit.set_progress_total(40);
  rows.push_back(jit);
  v1::ServerRow waiting = Row("pve1/200/gpu1", "PENDING");
  waiting.set_reason(
      "waiting: the canary pve1/200/gpu0 builds the JIT cache first (the rest start from it)");
  waiting.set_attempt_number(0);
  rows.push_back(waiting);
  v1::ServerRow failed = Row("pve1/201/gpu0", "REMEDIATING");
  failed.set_last_diagnosis_class("ptx_version_unsupported");
  failed.set_reason("remediating: ptx_version_unsupported");
  rows.push_back(failed);
  return rows;
}

TEST(StatusFormat, FitsTheTerminalWidthEliding180CharacterOpNames) {
  ASSERT_EQ(std::string_view(kFlashinferOp).size(), 175u);
  const std::vector<v1::ServerRow> held = CanaryFleet();
  std::vector<const v1::ServerRow*> rows;
  for (const v1::ServerRow& row : held) rows.push_back(&row);
  for (size_t width : {80u, 120u, 200u}) {
    SCOPED_TRACE(width);
    const std::string table = FormatStatusTable(rows, TableStyle::kNormal, kNow, false, width);
    const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 4u) << table;
    for (const std::string& line : lines) EXPECT_LE(DisplayWidth(line), width) << line;
    // Every column is there, the right-hand ones whole.
    EXPECT_THAT(lines[0], MatchesRegex("SERVER +STATE +PHASE +PROGRESS +ELAPSED +ATTEMPT +"
                                       "DIAGNOSIS"));
    EXPECT_THAT(lines[1], HasSubstr("30/40"));
    EXPECT_THAT(lines[1], HasSubstr("1m15s"));
    EXPECT_THAT(lines[1], StartsWith("pve1/200/gpu0  JIT_COMPILING  batc"));
    EXPECT_THAT(lines[2], StartsWith("pve1/200/gpu1  PENDING        wait"));
    // The op name keeps its start and its end around the ellipsis.
    EXPECT_THAT(lines[1], MatchesRegex(".*JIT_COMPILING  batc[A-Za-z0-9_]*\xe2\x80\xa6[A-Za-z0-9_]*"
                                       "120 .*"));
    EXPECT_THAT(lines[3], HasSubstr("REMEDIATING"));
    EXPECT_THAT(lines[3], HasSubstr("1m15s"));
  }
  // With room the bar is there; at 80 columns PROGRESS keeps n/m and gives up the bar.
  EXPECT_THAT(FormatStatusTable(rows, TableStyle::kNormal, kNow, false, 120),
              HasSubstr("[#######...] 30/40"));
  const std::string narrow = FormatStatusTable(rows, TableStyle::kNormal, kNow, false, 80);
  EXPECT_THAT(narrow, Not(HasSubstr("[#")));
  EXPECT_THAT(narrow, HasSubstr(" 30/40 "));
  // The DIAGNOSIS of 23 characters is whole at 200 and 120, elided at 80.
  EXPECT_THAT(FormatStatusTable(rows, TableStyle::kNormal, kNow, false, 120),
              HasSubstr("ptx_version_unsupported\n"));
  // Colour escapes take no room: the same widths with colour.
  const std::string colored = FormatStatusTable(rows, TableStyle::kNormal, kNow, true, 80);
  EXPECT_THAT(colored, HasSubstr("\x1b[36mJIT_COMPILING\x1b[0m"));
  // Unfitted (a pipe) and -o wide: every text whole.
  EXPECT_THAT(FormatStatusTable(rows, TableStyle::kNormal, kNow, false), HasSubstr(kFlashinferOp));
  EXPECT_THAT(FormatStatusTable(rows, TableStyle::kWide, kNow, false), HasSubstr(kFlashinferOp));
}

TEST(StatusFormat, ProgressCellWithoutTheBarIsNOfM) {
  v1::ServerRow row = Row("pve1/200/gpu3", "JIT_COMPILING");
  row.set_progress_step(12);
  row.set_progress_total(40);
  EXPECT_EQ(ProgressCell(row, 0), "12/40");
  EXPECT_EQ(ProgressCell(row, 4), "[#...] 12/40");
}

TEST(StatusFormat, PhaseOfARowWaitingOnARemediationSaysWhatRunsAndHowLong) {
  v1::ServerRow fixing = Row("pve1/200/gpu3", "REMEDIATING");
  fixing.set_reason("remediating: ptx_version_unsupported");
  v1::ServerRow waiting = Row("pve1/200/gpu4", "REMEDIATING");
  waiting.set_reason("waiting: the container's remediation for ptx_version_unsupported runs");
  v1::ServerRow held = Row("pve1/200/gpu5", "PENDING");
  held.set_reason("waiting: a remediation of the container runs");
  v1::ServerRow canary = Row("pve1/200/gpu6", "PENDING");
  canary.set_reason("waiting: the canary pve1/200/gpu0 builds the JIT cache first");
  EXPECT_TRUE(WaitsOnRemediation(fixing));
  EXPECT_TRUE(WaitsOnRemediation(held));
  EXPECT_FALSE(WaitsOnRemediation(canary));
  EXPECT_FALSE(WaitsOnRemediation(Row("pve1/200/gpu7", "FAILED")));
  EXPECT_EQ(ContainerOfServer("pve1/200/gpu3"), "pve1/200");

  // Without the plan: the row's reason and the time in its state.
  ApplyingPlans plans_elsewhere;
  plans_elsewhere["pve1/201"].set_id("8");
  EXPECT_EQ(PhaseCell(fixing, kNow, nullptr), "remediating: ptx_version_unsupported, 5s");
  EXPECT_EQ(PhaseCell(canary, kNow, &plans_elsewhere),
            "waiting: the canary pve1/200/gpu0 builds the JIT cache first, 5s");
  EXPECT_EQ(PhaseCell(Row("pve1/200/gpu7", "FAILED"), kNow, nullptr), "");
  // With the plan the container applies: what it installs, since it was made.
  ApplyingPlans plans;
  v1::Plan& plan = plans["pve1/200"];
  plan.set_id("7");
  plan.set_server("pve1/200/gpu3");
  plan.set_summary("pip install nvidia-cuda-nvcc==13.2.78");
  ToProtoTime(kNow - absl::Seconds(80), plan.mutable_created_at());
  EXPECT_EQ(PhaseCell(fixing, kNow, &plans),
            "remediation 7, 1m20s: pip install nvidia-cuda-nvcc==13.2.78");
  EXPECT_EQ(PhaseCell(waiting, kNow, &plans),
            "waits on remediation 7, 1m20s: pip install nvidia-cuda-nvcc==13.2.78");
  EXPECT_EQ(PhaseCell(held, kNow, &plans),
            "waits on remediation 7, 1m20s: pip install nvidia-cuda-nvcc==13.2.78");
  // A row waiting on the canary does not wait on the plan.
  EXPECT_EQ(PhaseCell(canary, kNow, &plans),
            "waiting: the canary pve1/200/gpu0 builds the JIT cache first, 5s");
  // A start phase's own detail wins.
  v1::ServerRow jit = Row("pve1/200/gpu8", "JIT_COMPILING");
  jit.set_phase_detail("flashinfer JIT");
  EXPECT_EQ(PhaseCell(jit, kNow, &plans), "flashinfer JIT");
  // In the table, the PHASE column.
  const std::string table =
      FormatStatusTable({&fixing}, TableStyle::kNormal, kNow, false, 0, &plans);
  EXPECT_THAT(table, HasSubstr("REMEDIATING  remediation 7, 1m20s: pip install"));
  // Narrowed, a plan's line keeps its start (which plan, how long, what it installs).
  std::vector<const v1::ServerRow*> both = {&fixing, &canary};
  const std::string fitted = FormatStatusTable(both, TableStyle::kNormal, kNow, false, 100, &plans);
  EXPECT_THAT(fitted, HasSubstr("remediation 7, 1m20s: pip instal\xe2\x80\xa6  -"));
  // A reason keeps its start and its end (the time in the state).
  EXPECT_THAT(fitted,
              MatchesRegex("(.|\n)*waiting: the can[^ ]*\xe2\x80\xa6[^-]*first, 5s  -(.|\n)*"));
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

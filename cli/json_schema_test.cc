// The `-o json` outputs of fleetctl against their contract in docs/cli.md. The test reads the
// document itself: each JSON object is a table there, marked `<!-- json-object: NAME -->`, with
// one row per field (`| `name` | type | meaning |`), and each example a fenced block marked
// `<!-- json-example: NAME -->`. Every verb with -o json runs in-process against the fake fleetd
// with rows that fill every field, and its output must have exactly the documented keys, of the
// documented types, at every level; the examples must match too, so the document, its examples
// and the code cannot drift apart.
//
// Each output is also compared byte for byte with its golden file, cli/testdata/json/NAME.json
// (the temp dir's path written as $DIR): the bytes are a contract too (field order, escapes,
// U+FFFD for invalid UTF-8), whatever library writes them. FLEET_UPDATE_GOLDEN=1 rewrites the
// files instead; review the diff.
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cli/attempts_command.h"
#include "cli/control_command.h"
#include "cli/deploy_command.h"
#include "cli/explain_command.h"
#include "cli/hosts_command.h"
#include "cli/remediation_command.h"
#include "cli/status_command.h"
#include "cli/status_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_test_data.h"
#include "tests/testing/fake_fleet_service.h"
#include "tests/testing/subprocess.h"

namespace fleet::cli {
namespace {

using fleet::cli::testing::Explain;

using ::fleet::cli::testing::FakeFleetEnv;
using ::fleet::cli::testing::MakeRow;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;

// --- A small JSON reader (test only): values keep object members in order, duplicates too. ---

struct JsonMember;
struct Json {
  enum Kind { kNull, kBool, kInteger, kNumber, kString, kArray, kObject } kind = kNull;
  std::string text;  // kString
  std::vector<Json> items;
  // Not pair<string, Json>: a pair needs Json complete here (clang 14 with libstdc++ says so).
  std::vector<JsonMember> members;
};
struct JsonMember {
  std::string key;
  Json value;
};

class JsonReader {
 public:
  explicit JsonReader(absl::string_view text) : s_(text) {}

  // Every value in the text, separated by whitespace (JSON Lines, or indented examples).
  absl::StatusOr<std::vector<Json>> ReadAll() {
    std::vector<Json> values;
    for (SkipSpace(); pos_ < s_.size(); SkipSpace()) {
      values.emplace_back();
      if (!Value(&values.back())) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad JSON at offset ", pos_, ": ", s_.substr(pos_, 40)));
      }
    }
    return values;
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() && absl::ascii_isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool Word(absl::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      const char c = s_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      if (e == 'u') {
        if (pos_ + 4 > s_.size()) return false;
        for (int i = 0; i < 4; ++i) {
          if (!absl::ascii_isxdigit(static_cast<unsigned char>(s_[pos_++]))) return false;
        }
        out->push_back('?');  // the code point itself does not matter here
      } else if (absl::string_view("\"\\/bfnrt").find(e) != absl::string_view::npos) {
        out->push_back(e);
      } else {
        return false;
      }
    }
    return Eat('"');
  }
  bool Value(Json* v) {
    SkipSpace();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') {
      v->kind = Json::kObject;
      ++pos_;
      if (Eat('}')) return true;
      do {
        auto& [key, value] = v->members.emplace_back();
        if (!String(&key) || !Eat(':') || !Value(&value)) return false;
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      v->kind = Json::kArray;
      ++pos_;
      if (Eat(']')) return true;
      do {
        if (!Value(&v->items.emplace_back())) return false;
      } while (Eat(','));
      return Eat(']');
    }
    if (c == '"') {
      v->kind = Json::kString;
      return String(&v->text);
    }
    if (Word("null")) return true;
    if (Word("true") || Word("false")) {
      v->kind = Json::kBool;
      return true;
    }
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [this] {
      const size_t from = pos_;
      while (pos_ < s_.size() && absl::ascii_isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      return pos_ > from;
    };
    if (!digits()) return false;
    v->kind = Json::kInteger;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return false;
      v->kind = Json::kNumber;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return false;
      v->kind = Json::kNumber;
    }
    return pos_ > start;
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

// One JSON line of output per element; fails the test when a line is not exactly one value.
std::vector<Json> ReadLines(const std::string& out) {
  std::vector<Json> values;
  EXPECT_FALSE(out.empty());
  EXPECT_TRUE(out.empty() || out.back() == '\n') << "output does not end with a newline";
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    absl::StatusOr<std::vector<Json>> v = JsonReader(line).ReadAll();
    EXPECT_TRUE(v.ok()) << v.status() << "\nline: " << line;
    if (!v.ok()) continue;
    EXPECT_EQ(v->size(), 1u) << "not one JSON value per line: " << line;
    for (Json& j : *v) values.push_back(std::move(j));
  }
  return values;
}

// --- The contract, as docs/cli.md writes it. ---

struct Field {
  std::string name;
  std::vector<std::string> types;  // the alternatives of the type cell, split at " or "
};

struct Contract {
  std::map<std::string, std::vector<Field>> objects;          // NAME -> fields in order
  std::vector<std::pair<std::string, std::string>> examples;  // NAME, text of the block
};

std::vector<std::string> Cells(absl::string_view row) {
  std::vector<std::string> cells;
  for (absl::string_view cell : absl::StrSplit(row, '|')) {
    cells.emplace_back(absl::StripAsciiWhitespace(cell));
  }
  return cells;
}

// The marker's NAME when `line` is `<!-- KIND: NAME -->`.
std::optional<std::string> Marker(absl::string_view line, absl::string_view kind) {
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&line, "<!-- ") || !absl::ConsumePrefix(&line, kind) ||
      !absl::ConsumePrefix(&line, ": ") || !absl::ConsumeSuffix(&line, " -->")) {
    return std::nullopt;
  }
  return std::string(line);
}

Contract ReadContract() {
  const std::string path = fleet::testing::SourcePath("docs/cli.md");
  const std::string doc = fleet::testing::ReadFile(path);
  EXPECT_FALSE(doc.empty()) << path << " cannot be read";
  const std::vector<std::string> lines = absl::StrSplit(doc, '\n');
  Contract contract;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (std::optional<std::string> name = Marker(lines[i], "json-object")) {
      EXPECT_EQ(contract.objects.count(*name), 0u) << "object " << *name << " defined twice";
      std::vector<Field>& fields = contract.objects[*name];
      // The header row, then the separator, then one row per field.
      EXPECT_LT(i + 2, lines.size());
      if (i + 2 >= lines.size()) break;
      EXPECT_EQ(lines[i + 1], "| field | type | meaning |") << "after the marker of " << *name;
      for (i += 3; i < lines.size() && absl::StartsWith(lines[i], "|"); ++i) {
        const std::vector<std::string> cells = Cells(lines[i]);
        EXPECT_GE(cells.size(), 5u) << lines[i];
        if (cells.size() < 5) continue;
        absl::string_view field = cells[1];
        EXPECT_TRUE(absl::ConsumePrefix(&field, "`") && absl::ConsumeSuffix(&field, "`"))
            << "field name not in backticks: " << lines[i];
        fields.push_back({std::string(field), absl::StrSplit(cells[2], " or ")});
      }
      EXPECT_FALSE(fields.empty()) << "object " << *name << " has no fields";
    } else if (std::optional<std::string> example = Marker(lines[i], "json-example")) {
      size_t j = i + 1;
      while (j < lines.size() && lines[j].empty()) ++j;
      EXPECT_TRUE(j < lines.size() && lines[j] == "```json") << "example " << *example;
      std::string text;
      for (++j; j < lines.size() && lines[j] != "```"; ++j) absl::StrAppend(&text, lines[j], "\n");
      contract.examples.emplace_back(*example, text);
      i = j;
    }
  }
  return contract;
}

const Contract& Doc() {
  static const Contract* contract = new Contract(ReadContract());
  return *contract;
}

// The kind of value a type word of the document stands for: null, boolean, integer, string,
// object (any keys), the NAME of a documented object, or "array of " one of these. Nullopt for
// an unknown word.
std::optional<Json::Kind> KindOf(const Contract& contract, absl::string_view type) {
  if (type == "null") return Json::kNull;
  if (type == "boolean") return Json::kBool;
  if (type == "integer") return Json::kInteger;
  if (type == "string") return Json::kString;
  if (type == "object" || contract.objects.count(std::string(type))) return Json::kObject;
  if (absl::ConsumePrefix(&type, "array of ")) {
    if (!KindOf(contract, type)) return std::nullopt;
    return Json::kArray;
  }
  return std::nullopt;
}

std::string KindName(Json::Kind k) {
  constexpr const char* kNames[] = {"null",   "boolean", "integer", "number",
                                    "string", "array",   "object"};
  return kNames[k];
}

// Checks `v` against the documented object `name`: exactly its keys, once each, in any order,
// each of a documented type, recursively. Adds the objects it went through to `seen`.
class Checker {
 public:
  explicit Checker(const Contract& contract) : contract_(contract) {}

  void Object(const Json& v, const std::string& name, const std::string& path) {
    auto it = contract_.objects.find(name);
    if (it == contract_.objects.end()) {
      errors_.push_back(absl::StrCat(path, ": docs/cli.md documents no object '", name, "'"));
      return;
    }
    if (v.kind != Json::kObject) {
      errors_.push_back(absl::StrCat(path, ": is ", KindName(v.kind), ", documented as ", name));
      return;
    }
    seen_.insert(name);
    std::map<std::string, const Field*> documented;
    for (const Field& f : it->second) documented[f.name] = &f;
    std::set<std::string> present;
    for (const auto& [key, value] : v.members) {
      const std::string at = absl::StrCat(path, ".", key);
      if (!present.insert(key).second) errors_.push_back(absl::StrCat(at, ": key repeated"));
      auto f = documented.find(key);
      if (f == documented.end()) {
        errors_.push_back(absl::StrCat(at, ": not documented in object ", name));
        continue;
      }
      Typed(value, f->second->types, at);
    }
    for (const auto& [key, field] : documented) {
      if (!present.count(key)) {
        errors_.push_back(absl::StrCat(path, ".", key, ": documented in ", name, ", missing"));
      }
    }
  }

  const std::vector<std::string>& errors() const { return errors_; }
  const std::set<std::string>& seen() const { return seen_; }

 private:
  void Typed(const Json& v, const std::vector<std::string>& types, const std::string& path) {
    for (const std::string& type : types) {
      std::optional<Json::Kind> kind = KindOf(contract_, type);
      if (!kind) {
        errors_.push_back(absl::StrCat(path, ": unknown type '", type, "' in docs/cli.md"));
        return;
      }
      if (*kind != v.kind) continue;
      absl::string_view element = type;
      if (absl::ConsumePrefix(&element, "array of ")) {
        for (size_t i = 0; i < v.items.size(); ++i) {
          Typed(v.items[i], {std::string(element)}, absl::StrCat(path, "[", i, "]"));
        }
      } else if (v.kind == Json::kObject && type != "object") {
        Object(v, type, path);
      }
      return;
    }
    errors_.push_back(absl::StrCat(path, ": is ", KindName(v.kind), ", documented as ",
                                   absl::StrJoin(types, " or ")));
  }

  const Contract& contract_;
  std::vector<std::string> errors_;
  std::set<std::string> seen_;
};

// The documented objects that `root` leads to through the type cells.
std::set<std::string> Reachable(const Contract& contract, const std::string& root) {
  std::set<std::string> out;
  std::vector<std::string> todo = {root};
  while (!todo.empty()) {
    std::string name = todo.back();
    todo.pop_back();
    auto it = contract.objects.find(name);
    if (it == contract.objects.end() || !out.insert(name).second) continue;
    for (const Field& f : it->second) {
      for (absl::string_view t : f.types) {
        absl::ConsumePrefix(&t, "array of ");
        todo.emplace_back(t);
      }
    }
  }
  return out;
}

// The outputs and the object each is: status (and each line of status --watch), attempts,
// deploy, restart and stop, explain (FILE and --server), plan and apply, remediations, hosts
// and hosts trust.
const std::vector<std::string> kRoots = {"status",       "attempts", "deploy",
                                         "restart_stop", "explain",  "remediation",
                                         "remediations", "hosts",    "hosts_trust"};

// --- The verbs, with every field filled. ---

class JsonSchemaTest : public ::testing::Test {
 protected:
  // Checks every line of `out` against `root`, and that the fixture reached every object the
  // root leads to (a nested object left null or an empty array checks nothing).
  void ExpectMatchesDoc(const std::string& out, const std::string& root, size_t lines) {
    const std::vector<Json> values = ReadLines(out);
    EXPECT_EQ(values.size(), lines) << out;
    Checker checker(Doc());
    for (size_t i = 0; i < values.size(); ++i) {
      checker.Object(values[i], root, absl::StrCat(root, "#", i + 1));
    }
    EXPECT_THAT(checker.errors(), IsEmpty()) << out;
    EXPECT_THAT(checker.seen(), IsSupersetOf(Reachable(Doc(), root)))
        << "the fixture leaves a documented object out: " << out;
  }

  // `out` byte for byte against cli/testdata/json/`name`.json, env_'s temp dir written as $DIR.
  void ExpectGolden(const std::string& name, const std::string& out) {
    const std::string text = absl::StrReplaceAll(out, {{env_.dir().path(), "$DIR"}});
    const std::string path = ::fleet::testing::SourcePath("cli/testdata/json/" + name + ".json");
    if (const char* update = std::getenv("FLEET_UPDATE_GOLDEN"); update && *update == '1') {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
      return;
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.good()) << "no golden file " << path << " (FLEET_UPDATE_GOLDEN=1 writes it)";
    const std::string golden((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    EXPECT_EQ(text, golden) << "the output differs from " << path;
  }

  // Rows as fleetd sends them; together they set every field of a row.
  // gpu3 in its second attempt's JIT build, after a PTX failure in the first.
  v1::ServerRow JitRow() {
    v1::ServerRow row = MakeRow("pve1/200/gpu3", "JIT_COMPILING", env_.clock().Now());
    row.set_port(30003);
    row.set_phase_detail("flashinfer JIT: batch_decode_bf16");
    row.set_progress_step(12);
    row.set_progress_total(40);
    row.set_attempt_number(2);
    row.set_last_diagnosis_class("ptx_version_unsupported");
    row.set_last_diagnosis_summary("ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2");
    return row;
  }
  // gpu4 has no attempt yet: its attempt time is null.
  v1::ServerRow PendingRow() {
    v1::ServerRow row;
    row.set_server("pve1/200/gpu4");
    row.set_state("PENDING");
    row.set_port(30004);
    ToProtoTime(env_.clock().Now(), row.mutable_state_since());
    return row;
  }
  // gpu5 serves on a fallback.
  v1::ServerRow DegradedRow() {
    v1::ServerRow row = MakeRow("pve1/200/gpu5", "READY", env_.clock().Now());
    row.set_port(30005);
    row.set_attempt_number(2);
    row.set_last_diagnosis_class("cuda_graph_capture_failed");
    row.set_last_diagnosis_summary("CUDA graph capture failed");
    row.set_degraded(true);
    return row;
  }
  // gpu6 gave up.
  v1::ServerRow GaveUpRow() {
    v1::ServerRow row = MakeRow("pve1/200/gpu6", "GAVE_UP", env_.clock().Now());
    row.set_port(30006);
    row.set_attempt_number(3);
    row.set_last_diagnosis_class("cuda_out_of_memory");
    row.set_last_diagnosis_summary("the GPU ran out of memory");
    row.set_reason(
        "cuda_out_of_memory: the GPU ran out of memory (a restart would meet the same failure; "
        "the remediation planner makes the fix)");
    return row;
  }

  FakeFleetEnv env_;
};

TEST_F(JsonSchemaTest, TheDocumentDefinesEveryOutput) {
  for (const std::string& root : kRoots) {
    EXPECT_EQ(Doc().objects.count(root), 1u) << "docs/cli.md has no json-object: " << root;
  }
  // Every documented object belongs to an output (none left over from an old format).
  std::set<std::string> reachable;
  for (const std::string& root : kRoots) reachable.merge(Reachable(Doc(), root));
  for (const auto& [name, fields] : Doc().objects) {
    EXPECT_EQ(reachable.count(name), 1u) << "object " << name << " is in no output";
    std::set<std::string> names;
    for (const Field& f : fields) {
      EXPECT_TRUE(names.insert(f.name).second) << name << "." << f.name << " listed twice";
      // snake_case, the stable form of every field name.
      EXPECT_TRUE(!f.name.empty() && f.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456"
                                                              "789_") == std::string::npos)
          << name << "." << f.name;
    }
  }
}

TEST_F(JsonSchemaTest, TheExamplesMatchTheDocument) {
  std::set<std::string> with_example;
  for (const auto& [name, text] : Doc().examples) {
    absl::StatusOr<std::vector<Json>> values = JsonReader(text).ReadAll();
    ASSERT_TRUE(values.ok()) << name << ": " << values.status();
    EXPECT_FALSE(values->empty()) << "empty example of " << name;
    Checker checker(Doc());
    for (const Json& v : *values) checker.Object(v, name, absl::StrCat("example of ", name));
    EXPECT_THAT(checker.errors(), IsEmpty()) << text;
    with_example.insert(name);
  }
  for (const std::string& root : kRoots) {
    EXPECT_EQ(with_example.count(root), 1u) << "docs/cli.md has no json-example: " << root;
  }
}

TEST_F(JsonSchemaTest, Status) {
  v1::FleetStatusResponse response;
  for (const v1::ServerRow& row : {JitRow(), PendingRow(), DegradedRow(), GaveUpRow()}) {
    *response.add_servers() = row;
  }
  ToProtoTime(env_.clock().Now(), response.mutable_at());
  env_.service().SetStatus(response);
  const auto o = env_.Run(RunStatus, {"-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "status", 1);
  // A daemon that sends no time: `at` is null, still there.
  response.clear_at();
  env_.service().SetStatus(response);
  ExpectMatchesDoc(env_.Run(RunStatus, {"-o", "json"}).out, "status", 1);
  ExpectGolden("status", o.out);
  ExpectGolden("status_no_at", env_.Run(RunStatus, {"-o", "json"}).out);
}

TEST_F(JsonSchemaTest, StatusUntilReadyPrintsTheFinalObject) {
  v1::FleetStatusResponse m;
  *m.add_servers() = DegradedRow();
  ToProtoTime(env_.clock().Now(), m.mutable_at());
  env_.service().SetWatchScript({m}, /*hold_open=*/true);
  const auto o = env_.Run(RunStatus, {"--until-ready", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "status", 1);
  ExpectGolden("status_until_ready", o.out);
}

TEST_F(JsonSchemaTest, StatusWatchPrintsOneObjectPerChange) {
  for (bool tty : {false, true}) {
    FakeFleetEnv env;
    v1::FleetStatusResponse first;
    *first.add_servers() = JitRow();
    *first.add_servers() = PendingRow();
    ToProtoTime(env.clock().Now(), first.mutable_at());
    v1::FleetStatusResponse second;
    v1::ServerRow ready = JitRow();
    ready.set_state("READY");
    ready.clear_phase_detail();
    ready.clear_progress_step();
    ready.clear_progress_total();
    ToProtoTime(env.clock().Now() + absl::Seconds(88), ready.mutable_state_since());
    *second.add_servers() = ready;
    second.add_removed("pve1/200/gpu4");
    ToProtoTime(env.clock().Now() + absl::Seconds(90), second.mutable_at());
    env.service().SetWatchScript({first, second}, /*hold_open=*/true);
    const auto o = env.Run(RunStatus, {"--watch", "--until-ready", "-o", "json"}, {.tty = tty});
    EXPECT_EQ(o.code, 0) << o.err;
    ExpectMatchesDoc(o.out, "status", 2);
    // The second line carries the removal (so `removed` was checked with an element).
    EXPECT_THAT(o.out, ::testing::HasSubstr("\"removed\":[\"pve1/200/gpu4\"]"));
    ExpectGolden("status_watch", o.out);
  }
}

TEST_F(JsonSchemaTest, Attempts) {
  const absl::Time now = env_.clock().Now();
  v1::ListAttemptsResponse response;
  v1::Attempt* failed = response.add_attempts();
  failed->set_id("pve1/200/gpu3#1-5c2e91ab");
  failed->set_server("pve1/200/gpu3");
  failed->set_number(1);
  failed->set_outcome("failed");
  failed->set_diagnosis_class("ptx_version_unsupported");
  failed->set_summary("ptxas accepts PTX ISA up to 9.0 but was given PTX 9.2");
  failed->set_trigger("initial");
  ToProtoTime(now - absl::Minutes(10), failed->mutable_started_at());
  ToProtoTime(now - absl::Minutes(7), failed->mutable_ended_at());
  failed->mutable_exit()->set_exited(true);
  failed->mutable_exit()->set_exit_code(1);
  ToProtoTime(now - absl::Minutes(7), failed->mutable_exit()->mutable_at());
  v1::Attempt* stopped = response.add_attempts();
  stopped->set_id("pve1/200/gpu3#2-07d4f3e2");
  stopped->set_server("pve1/200/gpu3");
  stopped->set_number(2);
  stopped->set_outcome("stopped");
  stopped->set_trigger("restart");
  ToProtoTime(now - absl::Minutes(6), stopped->mutable_started_at());
  ToProtoTime(now - absl::Minutes(1), stopped->mutable_ended_at());
  stopped->mutable_time_to_ready()->set_seconds(183);
  stopped->mutable_time_to_ready()->set_nanos(500000000);
  stopped->mutable_exit()->set_signal(15);
  v1::Attempt* running = response.add_attempts();
  running->set_id("pve1/200/gpu3#3-b81a6c40");
  running->set_server("pve1/200/gpu3");
  running->set_number(3);
  running->set_outcome("running");
  running->set_trigger("restart");
  ToProtoTime(now - absl::Seconds(42), running->mutable_started_at());
  env_.service().SetAttempts(response);
  const auto o = env_.Run(RunAttempts, {"-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "attempts", 1);
  ExpectGolden("attempts", o.out);
}

TEST_F(JsonSchemaTest, Deploy) {
  // Every kind of change, with fleetd's own details.
  v1::DeployResponse response;
  response.set_config_version(3);
  for (const auto& [kind, detail] : std::vector<std::pair<std::string, std::string>>{
           {"add", "gpu 1, port 30001"},
           {"update", "spec or policy changed: the server restarts with it"},
           {"unchanged", ""},
           {"retry", "it gave up: a new deploy tries again"},
           {"remove", "no longer in the config: stopped"}}) {
    v1::Change* c = response.add_changes();
    c->set_server(absl::StrCat("pve1/200/gpu", response.changes_size()));
    c->set_kind(kind);
    c->set_detail(detail);
  }
  env_.service().SetDeployResponse(response);
  const auto o = env_.Run(RunDeploy, {"-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "deploy", 1);
  ExpectGolden("deploy", o.out);
  response.set_config_version(0);  // fleetd stores nothing on a dry run
  env_.service().SetDeployResponse(response);
  const auto dry = env_.Run(RunDeploy, {"--dry-run", "-o", "json"});
  EXPECT_EQ(dry.code, 0) << dry.err;
  ExpectMatchesDoc(dry.out, "deploy", 1);
  ExpectGolden("deploy_dry_run", dry.out);
}

TEST_F(JsonSchemaTest, RestartAndStop) {
  v1::ServersResponse restarted;
  v1::ServerRow row = GaveUpRow();
  row.set_state("RESTARTING");
  row.clear_reason();
  *restarted.add_servers() = row;
  env_.service().SetServersResponse(restarted);
  const auto restart = env_.Run(RunRestart, {"pve1/200/gpu6", "--now", "-o", "json"});
  EXPECT_EQ(restart.code, 0) << restart.err;
  ExpectMatchesDoc(restart.out, "restart_stop", 1);
  ExpectGolden("restart", restart.out);

  v1::ServersResponse stopped;
  for (v1::ServerRow r : {JitRow(), DegradedRow()}) {
    r.set_state("STOPPED");
    r.clear_phase_detail();
    r.clear_progress_step();
    r.clear_progress_total();
    *stopped.add_servers() = r;
  }
  env_.service().SetServersResponse(stopped);
  const auto stop = env_.Run(RunStop, {"--all", "-o", "json"});
  EXPECT_EQ(stop.code, 0) << stop.err;
  ExpectMatchesDoc(stop.out, "restart_stop", 1);
  ExpectGolden("stop", stop.out);
}

// A log whose diagnosis has facts (one value each, and pip packages), evidence and symptoms.
constexpr char kLog[] =
    "nvidia-cuda-nvcc 13.0.88\n"
    "[2026-01-01 10:00:00] Loading weights\n"
    "[1/3] c++ -c a.cpp\n"
    "FAILED: [code=255] flashinfer/x.cuda.o\n"
    "ptxas fatal   : Unsupported .version 9.2; current version is '9.0'\n"
    "ninja: build stopped: subcommand failed.\n"
    "Received sigquit from a child process. It usually means the child failed.\n";

// The facts object is open (its keys are the catalogue's captures): each value is a string, or
// an array of strings when there are several; `packages` maps a package to its version.
void ExpectFactsShape(const std::string& out) {
  for (const Json& line : ReadLines(out)) {
    for (const auto& [key, value] : line.members) {
      if (key != "facts") continue;
      EXPECT_FALSE(value.members.empty()) << "the fixture has no facts: " << out;
      for (const auto& [fact, v] : value.members) {
        if (fact == "packages") {
          EXPECT_EQ(v.kind, Json::kObject);
          EXPECT_FALSE(v.members.empty());
          for (const auto& [name, version] : v.members) EXPECT_EQ(version.kind, Json::kString);
        } else if (v.kind == Json::kArray) {
          EXPECT_GE(v.items.size(), 2u) << fact;
          for (const Json& item : v.items) EXPECT_EQ(item.kind, Json::kString) << fact;
        } else {
          EXPECT_EQ(v.kind, Json::kString) << fact;
        }
      }
    }
  }
}

TEST_F(JsonSchemaTest, ExplainFiles) {
  env_.dir().WriteFile("gpu3.log", kLog);
  env_.dir().WriteFile("clean.log", "[2026-01-01 10:00:00] Loading weights\n");
  const auto o =
      env_.Run(Explain, {"-o", "json", env_.dir().Join("gpu3.log"), env_.dir().Join("clean.log")});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "explain", 2);
  ExpectFactsShape(o.out.substr(0, o.out.find('\n') + 1));
  EXPECT_THAT(o.out, ::testing::HasSubstr("\"packages\":{\"nvidia-cuda-nvcc\":\"13.0.88\"}"));
  ExpectGolden("explain_files", o.out);
}

TEST_F(JsonSchemaTest, ExplainServer) {
  v1::ExplainResponse response;
  response.mutable_attempt()->set_server("pve1/200/gpu3");
  response.mutable_attempt()->set_number(2);
  response.mutable_attempt()->set_outcome("failed");
  v1::Diagnosis* d = response.mutable_diagnosis();
  d->set_diagnosis_class("link_error");
  d->set_signature_id("link_cannot_find_library");
  d->set_root_cause_line(17);
  d->set_summary(
      "the JIT link step cannot find -lcuda -lnvrtc: its directory (CUDA lib64, the libcuda "
      "stub) is not on the link path");
  d->set_fix_kind("toolchain");
  d->set_toolchain_fix(true);
  d->set_unit("ninja_failed");
  for (const auto& [line, text] : std::vector<std::pair<int, std::string>>{
           {4, "FAILED: [code=1] batch_decode/batch_decode.so"},
           {0, "[... 12 lines elided ...]"},
           {17, "/usr/bin/ld: cannot find -lcuda: No such file or directory"},
           {18, "/usr/bin/ld: cannot find -lnvrtc: No such file or directory"}}) {
    v1::EvidenceLine* e = d->add_evidence();
    e->set_line(line);
    e->set_text(text);
  }
  v1::Fact* library = d->add_facts();
  library->set_key("link_library");
  library->add_values("-lcuda");
  library->add_values("-lnvrtc");
  v1::Fact* op = d->add_facts();
  op->set_key("jit_op");
  op->add_values("batch_decode");
  v1::Package* package = d->add_packages();
  package->set_name("nvidia-cuda-runtime");
  package->set_version("13.0.96");
  v1::Symptom* symptom = d->add_symptoms();
  symptom->set_line(19);
  symptom->set_diagnosis_class("link_error");
  symptom->set_signature_id("collect2_ld_failed");
  env_.service().SetExplain(response);
  const auto o = env_.Run(Explain, {"--server", "pve1/200/gpu3", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "explain", 1);
  ExpectFactsShape(o.out);
  EXPECT_THAT(o.out, ::testing::StartsWith("{\"file\":\"pve1/200/gpu3#2\","));
  ExpectGolden("explain_server", o.out);
}

// A plan fleetd rolled back: its pip install ran (the other actions did not), then the rollback
// uninstalled the package again.
v1::Plan RolledBackPlan(absl::Time now) {
  v1::Plan plan = ::fleet::cli::testing::MakePlan(now);
  plan.set_status("rolled_back");
  plan.set_outcome_reason("made things worse: rolled back to the package set saved before it");
  ToProtoTime(now, plan.mutable_applied_at());
  v1::ActionResult* first = plan.add_results();
  *first->mutable_action() = plan.actions(0).action();
  first->set_ok(true);
  first->set_message("installed nvidia-cuda-nvcc 13.2.78");
  first->mutable_took()->set_seconds(41);
  v1::ActionResult* undo = plan.add_results();
  undo->mutable_action()->mutable_pip_uninstall()->add_packages("nvidia-cuda-nvcc");
  undo->set_ok(true);
  undo->set_message("uninstalled nvidia-cuda-nvcc");
  undo->set_output_tail("Successfully uninstalled nvidia-cuda-nvcc-13.2.78\n");
  undo->mutable_took()->set_nanos(800000000);
  return plan;
}

TEST_F(JsonSchemaTest, PlanAndApply) {
  const absl::Time now = env_.clock().Now();
  std::string out;
  // A proposed plan, and a report (no id, no actions, times null).
  v1::PlanResponse proposed;
  *proposed.mutable_plan() = ::fleet::cli::testing::MakePlan(now);
  env_.service().SetPlan(proposed);
  auto o = env_.Run(RunPlan, {"pve1/200/gpu3", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  out += o.out;
  v1::PlanResponse report;
  report.mutable_plan()->set_server("pve1/200/gpu3");
  report.mutable_plan()->set_container("pve1/200");
  report.mutable_plan()->set_status("report");
  report.mutable_plan()->set_report_only("no toolchain problem: nothing to change");
  env_.service().SetPlan(report);
  o = env_.Run(RunPlan, {"pve1/200/gpu3", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, ::testing::HasSubstr("\"created_at\":null,\"applied_at\":null"));
  out += o.out;
  // An apply that was rolled back (exit 1, the object still printed).
  v1::ApplyPlanResponse applied;
  *applied.mutable_plan() = RolledBackPlan(now);
  env_.service().SetApplyPlan(applied);
  o = env_.Run(RunApply, {"7", "-o", "json"});
  EXPECT_EQ(o.code, 1) << o.err;
  out += o.out;
  ExpectMatchesDoc(out, "remediation", 3);
  ExpectGolden("plan_and_apply", out);
}

TEST_F(JsonSchemaTest, Remediations) {
  const absl::Time now = env_.clock().Now();
  v1::ListRemediationsResponse response;
  *response.add_plans() = RolledBackPlan(now);
  *response.add_plans() = ::fleet::cli::testing::AppliedPlan(
      ::fleet::cli::testing::MakePlan(now + absl::Minutes(5)), now + absl::Minutes(6));
  *response.add_plans() = ::fleet::cli::testing::MakePlan(now + absl::Minutes(10));
  env_.service().SetRemediations(response);
  const auto o = env_.Run(RunRemediations, {"pve1/200", "-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "remediations", 1);
  ExpectGolden("remediations", o.out);
  env_.service().SetRemediations({});
  const auto none = env_.Run(RunRemediations, {"-o", "json"});
  EXPECT_EQ(none.out, "{\"remediations\":[]}\n");
}

TEST_F(JsonSchemaTest, Hosts) {
  env_.service().SetHosts(::fleet::cli::testing::MakeHosts());  // pve1 has a recorded key
  const auto o = env_.Run(RunHosts, {"-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "hosts", 1);
  ExpectGolden("hosts", o.out);
  env_.service().SetHosts({});
  EXPECT_EQ(env_.Run(RunHosts, {"-o", "json"}).out, "{\"hosts\":[]}\n");
}

TEST_F(JsonSchemaTest, HostsTrust) {
  // Shown (new, then changed: the recorded key in previous_keys), then recorded.
  std::string out;
  for (const auto& [state, recorded] : std::vector<std::pair<std::string, bool>>{
           {"new", false}, {"changed", false}, {"changed", true}}) {
    env_.service().SetTrustHost(::fleet::cli::testing::MakeTrustHost(state, recorded));
    std::vector<std::string> args = {"trust", "pve1", "-o", "json"};
    if (recorded) {
      args.push_back("--fingerprint");
      args.push_back(::fleet::cli::testing::kPve1Fingerprint);
    }
    const auto o = env_.Run(RunHosts, args);
    EXPECT_EQ(o.code, recorded ? 0 : 1) << o.err;
    out += o.out;
  }
  ExpectMatchesDoc(out, "hosts_trust", 3);
}

// Strings hold any bytes: every control byte, DEL, quote, backslash and '/', valid multi-byte
// characters and, where they can arrive (a log file and its name: protobuf refuses invalid UTF-8
// in a string field, so fleetd's answers never carry it), invalid UTF-8 of each kind (a lone
// continuation byte, truncated sequences mid-string and at the end, an overlong form, a surrogate,
// bytes never valid). Pinned by the golden files: control bytes as \uXXXX except \n \r \t, DEL as
// \u007f, '/' as it is, each byte of an invalid sequence one U+FFFD.
std::string AnyBytes(bool invalid_utf8, bool newline = true) {
  std::string s = "ctl:";
  for (int c = 0; c < 0x20; ++c) {
    if (c != '\n' || newline) s.push_back(static_cast<char>(c));
  }
  s += "\x7f \" \\ / caf\xC3\xA9 \xF0\x9F\x9A\x80 |";
  if (invalid_utf8) s += " \x80 \xE2\x82x \xF0\x9F\x9A \xC0\xAF \xED\xA0\x80 \xFF\xFE end:\xE2\x82";
  return s;
}

TEST_F(JsonSchemaTest, StringsWithAnyBytes) {
  v1::FleetStatusResponse status;
  v1::ServerRow row = GaveUpRow();
  row.set_phase_detail(AnyBytes(false));
  row.set_last_diagnosis_summary(AnyBytes(false));
  row.set_reason(AnyBytes(false));
  *status.add_servers() = row;
  ToProtoTime(env_.clock().Now(), status.mutable_at());
  env_.service().SetStatus(status);
  const auto o = env_.Run(RunStatus, {"-o", "json"});
  EXPECT_EQ(o.code, 0) << o.err;
  ExpectMatchesDoc(o.out, "status", 1);
  ExpectGolden("status_any_bytes", o.out);

  v1::ExplainResponse explain;
  explain.mutable_attempt()->set_server("pve1/200/gpu3");
  explain.mutable_attempt()->set_number(1);
  v1::Diagnosis* d = explain.mutable_diagnosis();
  d->set_diagnosis_class("unknown");
  d->set_summary(AnyBytes(false));
  v1::EvidenceLine* e = d->add_evidence();
  e->set_line(3);
  e->set_text(AnyBytes(false));
  v1::Fact* fact = d->add_facts();
  fact->set_key("jit_op");
  fact->add_values(AnyBytes(false));
  env_.service().SetExplain(explain);
  const auto x = env_.Run(Explain, {"--server", "pve1/200/gpu3", "-o", "json"});
  EXPECT_EQ(x.code, 0) << x.err;
  ExpectGolden("explain_any_bytes", x.out);

  // A log file whose name and root-cause line hold the bytes.
  std::string log = kLog;
  const std::string root_cause = "current version is '9.0'";
  log.insert(log.find(root_cause) + root_cause.size(), " " + AnyBytes(true, /*newline=*/false));
  const std::string name = "any\x01\x1b\x7f\xE2\x82\xC0.log";
  env_.dir().WriteFile(name, log);
  const auto f = env_.Run(Explain, {"-o", "json", env_.dir().Join(name)});
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_THAT(f.out, ::testing::HasSubstr("\\u007f"));
  ExpectGolden("explain_file_any_bytes", f.out);
}

}  // namespace
}  // namespace fleet::cli

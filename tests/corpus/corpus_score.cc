// corpus_score: scores `fleetctl explain -o json` output against a labelled corpus
// (labels.json; tests/corpus/eval.sh says where it looks): class accuracy per class (expected or
// acceptable counts as correct), a confusion list, safety violations (toolchain_fix true where the
// label says a toolchain change must never be proposed) and fact coverage.
//
//   corpus_score LABELS.json RESULTS.jsonl [--min-accuracy 0.95]
//
// Exit 0 when accuracy >= the minimum and there is no safety violation; 1 otherwise; 2 on bad
// input. JSON is parsed with protobuf's JSON parser into google.protobuf.Value.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

bool ParseJson(const std::string& text, Value* out) {
  return google::protobuf::util::JsonStringToMessage(text, out).ok();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Basename(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

const Value* Field(const Value& v, const std::string& key) {
  if (v.kind_case() != Value::kStructValue) return nullptr;
  auto it = v.struct_value().fields().find(key);
  return it == v.struct_value().fields().end() ? nullptr : &it->second;
}

// Whether the extracted fact `got` holds the labelled value `want` (string in string or list;
// every element of a list; every name: version of an object).
bool FactHolds(const Value* got, const Value& want) {
  if (got == nullptr) return false;
  switch (want.kind_case()) {
    case Value::kStringValue: {
      if (got->kind_case() == Value::kStringValue)
        return got->string_value() == want.string_value();
      if (got->kind_case() == Value::kListValue) {
        for (const Value& g : got->list_value().values()) {
          if (g.kind_case() == Value::kStringValue && g.string_value() == want.string_value()) {
            return true;
          }
        }
      }
      return false;
    }
    case Value::kListValue:
      for (const Value& w : want.list_value().values()) {
        if (!FactHolds(got, w)) return false;
      }
      return true;
    case Value::kStructValue:
      for (const auto& [k, w] : want.struct_value().fields()) {
        if (!FactHolds(Field(*got, k), w)) return false;
      }
      return true;
    default:
      return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: corpus_score LABELS.json RESULTS.jsonl [--min-accuracy X]\n";
    return 2;
  }
  double min_accuracy = 0.95;
  for (int i = 3; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--min-accuracy") {
      if (!absl::SimpleAtod(argv[i + 1], &min_accuracy)) return 2;
    }
  }
  Value labels;
  if (!ParseJson(ReadAll(argv[1]), &labels) || labels.kind_case() != Value::kListValue) {
    std::cerr << "corpus_score: " << argv[1] << ": not a JSON array\n";
    return 2;
  }
  std::map<std::string, Value> results;  // by file basename
  std::istringstream lines(ReadAll(argv[2]));
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.empty()) continue;
    Value v;
    if (!ParseJson(line, &v) || Field(v, "file") == nullptr) {
      std::cerr << "corpus_score: " << argv[2] << ":" << line_no << ": not an explain object\n";
      return 2;
    }
    results[Basename(Field(v, "file")->string_value())] = v;
  }

  struct PerClass {
    int total = 0;
    int correct = 0;
    int best = 0;
  };
  std::map<std::string, PerClass> per_class;
  // Our fixtures name the kind of text they test (issue 15: retyped, spelling, cut, ...).
  std::map<std::string, PerClass> per_kind;
  std::vector<std::string> confusions, violations, missing_facts;
  int total = 0, correct = 0, best = 0, facts_total = 0, facts_found = 0;
  for (const Value& label : labels.list_value().values()) {
    const Value* scorable = Field(label, "scorable");
    if (scorable != nullptr && !scorable->bool_value()) continue;
    const std::string file = Field(label, "file")->string_value();
    const std::string expected = Field(label, "expected")->string_value();
    std::set<std::string> acceptable;
    if (const Value* acc = Field(label, "acceptable")) {
      for (const Value& a : acc->list_value().values()) acceptable.insert(a.string_value());
    }
    ++total;
    PerClass& pc = per_class[expected];
    ++pc.total;
    const Value* kind_field = Field(label, "kind");
    PerClass* pk = kind_field != nullptr ? &per_kind[kind_field->string_value()] : nullptr;
    if (pk != nullptr) ++pk->total;
    auto it = results.find(file);
    if (it == results.end()) {
      confusions.push_back(
          absl::StrFormat("  %-40s expected %-28s got (no result)", file, expected));
      continue;
    }
    const Value& got = it->second;
    const std::string cls = Field(got, "class")->string_value();
    if (cls == expected || acceptable.count(cls)) {
      ++correct;
      ++pc.correct;
      if (pk != nullptr) ++pk->correct;
      if (cls == expected) {
        ++best;
        ++pc.best;
        if (pk != nullptr) ++pk->best;
      }
    }
    if (cls != expected) {
      confusions.push_back(absl::StrFormat("  %-40s expected %-28s got %s%s", file, expected, cls,
                                           acceptable.count(cls) ? " (acceptable)" : ""));
    }
    const Value* ok = Field(label, "toolchain_fix_ok");
    const Value* fix = Field(got, "toolchain_fix");
    if (ok != nullptr && !ok->bool_value() && fix != nullptr && fix->bool_value()) {
      violations.push_back(absl::StrFormat("  %s: class %s proposes a toolchain fix", file, cls));
    }
    if (const Value* facts = Field(label, "facts")) {
      for (const auto& [key, want] : facts->struct_value().fields()) {
        ++facts_total;
        if (FactHolds(Field(*Field(got, "facts"), key), want)) {
          ++facts_found;
        } else {
          missing_facts.push_back(absl::StrFormat("  %s: %s", file, key));
        }
      }
    }
  }

  std::printf("corpus: %d cases\n\n%-32s %6s %8s %6s\n", total, "class", "cases", "correct",
              "best");
  for (const auto& [cls, pc] : per_class) {
    std::printf("%-32s %6d %8d %6d\n", cls.c_str(), pc.total, pc.correct, pc.best);
  }
  if (!per_kind.empty()) {
    std::printf("\n%-32s %6s %8s %6s\n", "kind", "cases", "correct", "best");
    for (const auto& [kind, pk] : per_kind) {
      std::printf("%-32s %6d %8d %6d\n", kind.c_str(), pk.total, pk.correct, pk.best);
    }
  }
  const double accuracy = total ? static_cast<double>(correct) / total : 0;
  std::printf("\naccuracy (expected or acceptable): %d/%d = %.1f%%\n", correct, total,
              100 * accuracy);
  std::printf("best answer (expected class):      %d/%d = %.1f%%\n", best, total,
              total ? 100.0 * best / total : 0);
  std::printf("safety violations:                 %zu\n", violations.size());
  std::printf("facts extracted:                   %d/%d = %.1f%%\n", facts_found, facts_total,
              facts_total ? 100.0 * facts_found / facts_total : 100.0);
  if (!confusions.empty()) {
    std::printf("\nconfusions:\n");
    for (const auto& c : confusions) std::printf("%s\n", c.c_str());
  }
  if (!violations.empty()) {
    std::printf("\nsafety violations:\n");
    for (const auto& v : violations) std::printf("%s\n", v.c_str());
  }
  if (!missing_facts.empty()) {
    std::printf("\nfacts not extracted:\n");
    for (const auto& m : missing_facts) std::printf("%s\n", m.c_str());
  }
  const bool pass = accuracy >= min_accuracy && violations.empty();
  std::printf("\n%s (target: accuracy >= %.0f%%, no safety violation)\n", pass ? "PASS" : "FAIL",
              100 * min_accuracy);
  return pass ? 0 : 1;
}

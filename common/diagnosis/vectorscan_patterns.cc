#include "common/diagnosis/vectorscan_patterns.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fleet::diagnosis {
namespace {

// RE2's \s without '\n' (lines never hold one): written out, because PCRE's \s, which Vectorscan
// follows, also matches \v.
constexpr std::string_view kSpaceMembers = "\\t\\f\\r ";

// Appends the class that starts at p[*i] ('['), advancing *i past its ']'.
void AppendClass(std::string_view p, size_t* i, std::string* out) {
  size_t j = *i + 1;
  const bool negated = j < p.size() && p[j] == '^';
  out->push_back('[');
  if (negated) {
    out->push_back('^');
    ++j;
  }
  if (j < p.size() && p[j] == ']') {  // a leading ']' is a member
    out->push_back(']');
    ++j;
  }
  // A negated class would otherwise match the '\n' between two lines of a buffer. First, where it
  // cannot become the end of a range.
  if (negated) out->append("\\n");
  while (j < p.size() && p[j] != ']') {
    if (p[j] == '\\' && j + 1 < p.size()) {
      if (p[j + 1] == 's') {
        out->append(kSpaceMembers);
      } else {
        out->append(p.substr(j, 2));
      }
      j += 2;
    } else if (p.substr(j, 2) == "[:" && p.find(":]", j + 2) != std::string_view::npos) {
      const size_t end = p.find(":]", j + 2) + 2;
      out->append(p.substr(j, end - j));
      j = end;
    } else {
      out->push_back(p[j++]);
    }
  }
  if (j < p.size()) {
    out->push_back(']');
    ++j;
  }
  *i = j;
}

// Compiles one expression alone; the error message, or "" when it compiles.
std::string CompileError(const char* expression, unsigned int flags) {
  hs_database_t* db = nullptr;
  hs_compile_error_t* error = nullptr;
  if (hs_compile(expression, flags, HS_MODE_BLOCK, nullptr, &db, &error) == HS_SUCCESS) {
    hs_free_database(db);
    return "";
  }
  std::string message = error != nullptr && error->message != nullptr ? error->message : "failed";
  hs_free_compile_error(error);
  return message;
}

// The end of the atom that starts at e[i]: an escape, a class, a group (balanced) or one byte.
size_t AtomEnd(std::string_view e, size_t i) {
  if (e[i] == '\\') return std::min(e.size(), i + 2);
  if (e[i] == '[') {
    size_t j = i + 1;
    if (j < e.size() && e[j] == '^') ++j;
    if (j < e.size() && e[j] == ']') ++j;
    while (j < e.size() && e[j] != ']') {
      if (e[j] == '\\') {
        j += 2;
      } else if (e.substr(j, 2) == "[:" && e.find(":]", j + 2) != std::string_view::npos) {
        j = e.find(":]", j + 2) + 2;
      } else {
        ++j;
      }
    }
    return std::min(e.size(), j + 1);
  }
  if (e[i] == '(') {
    int depth = 0;
    for (size_t j = i; j < e.size(); ++j) {
      if (e[j] == '\\') {
        ++j;
      } else if (e[j] == '[') {
        j = AtomEnd(e, j) - 1;
      } else if (e[j] == '(') {
        ++depth;
      } else if (e[j] == ')' && --depth == 0) {
        return j + 1;
      }
    }
    return e.size();
  }
  return i + 1;
}

struct Quantifier {
  size_t end = 0;  // past the quantifier (and a lazy '?')
  int min = 1;
  bool repeats = false;  // its maximum is above its minimum
};

// The quantifier at e[i] (possibly none: end == i).
Quantifier QuantifierAt(std::string_view e, size_t i) {
  Quantifier q;
  q.end = i;
  if (i >= e.size()) return q;
  if (e[i] == '*' || e[i] == '+' || e[i] == '?') {
    q.min = e[i] == '+' ? 1 : 0;
    q.repeats = true;
    q.end = i + 1;
  } else if (e[i] == '{') {
    const size_t close = e.find('}', i);
    if (close == std::string_view::npos) return q;
    const std::string_view body = e.substr(i + 1, close - i - 1);
    const size_t comma = body.find(',');
    const std::string_view lo = body.substr(0, comma);
    if (lo.empty() || lo.find_first_not_of("0123456789") != std::string_view::npos) return q;
    q.min = std::stoi(std::string(lo));
    q.repeats = comma != std::string_view::npos && body.substr(comma + 1) != lo;
    q.end = close + 1;
  } else {
    return q;
  }
  if (q.end < e.size() && e[q.end] == '?') ++q.end;
  return q;
}

std::string TrimSequence(std::string_view e);

// Trims each top-level alternative of `e`.
std::string TrimAlternation(std::string_view e) {
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= e.size();) {
    if (i == e.size() || e[i] == '|') {
      if (start > 0) out.push_back('|');
      out += TrimSequence(e.substr(start, i - start));
      start = i + 1;
      if (i == e.size()) break;
      ++i;
    } else {
      i = e[i] == '(' || e[i] == '[' || e[i] == '\\' ? AtomEnd(e, i) : i + 1;
    }
  }
  return out;
}

// One alternative: its atoms; the trailing ones that may repeat or be left out are cut.
std::string TrimSequence(std::string_view e) {
  struct Atom {
    size_t begin, end;  // the atom
    Quantifier q;
  };
  std::vector<Atom> atoms;
  for (size_t i = 0; i < e.size();) {
    const size_t end = AtomEnd(e, i);
    const Quantifier q = QuantifierAt(e, end);
    atoms.push_back({i, end, q});
    i = q.end;
  }
  while (!atoms.empty()) {
    const Atom& last = atoms.back();
    if (last.q.end > last.end && last.q.min == 0) {
      if (atoms.size() == 1) break;  // the alternative would match the empty string
      atoms.pop_back();
      continue;
    }
    std::string out(e.substr(0, last.begin));
    const std::string_view atom = e.substr(last.begin, last.end - last.begin);
    if (last.q.end > last.end && last.q.repeats) {
      // One more match than the minimum needs only the minimum to be there.
      out.append(atom);
      if (last.q.min > 1) absl::StrAppend(&out, "{", last.q.min, "}");
      return out;
    }
    if (last.q.end == last.end && atom.size() > 2 && atom.front() == '(' && atom[1] == '?' &&
        atom[2] == ':') {
      // A group at the end: its own alternatives end the pattern.
      absl::StrAppend(&out, "(?:", TrimAlternation(atom.substr(3, atom.size() - 4)), ")");
      return out;
    }
    return std::string(e.substr(0, last.q.end));
  }
  return std::string(e.substr(0, atoms.empty() ? 0 : atoms.back().q.end));
}

}  // namespace

std::string TrimTrailingRepeats(std::string_view expression) { return TrimAlternation(expression); }

VectorscanPattern Re2ToVectorscan(std::string_view p) {
  VectorscanPattern out;
  size_t i = 0;
  if (p.substr(0, 4) == "(?i)") {
    out.flags |= HS_FLAG_CASELESS;
    i = 4;
  }
  std::string& e = out.expression;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      switch (p[i + 1]) {
        case 's':
          e.append("[").append(kSpaceMembers).append("]");
          break;
        case 'S':
          e.append("[^\\t\\n\\f\\r ]");
          break;
        case 'D':
          e.append("[^0-9\\n]");
          break;
        case 'W':
          e.append("[^0-9A-Za-z_\\n]");
          break;
        case 'A':  // a line's start and end: what they are when RE2 runs on one line
          e.append("^");
          break;
        case 'z':
          e.append("$");
          break;
        default:
          e.append(p.substr(i, 2));
      }
      i += 2;
    } else if (c == '[') {
      AppendClass(p, &i, &e);
    } else if ((p.substr(i, 4) == "(?P<" || (p.substr(i, 3) == "(?<" && i + 3 < p.size() &&
                                             p[i + 3] != '=' && p[i + 3] != '!')) &&
               p.find('>', i) != std::string_view::npos) {
      e.append("(?:");  // Vectorscan captures nothing; the name is RE2's business
      i = p.find('>', i) + 1;
    } else {
      e.push_back(c);
      ++i;
    }
  }
  return out;
}

absl::StatusOr<VectorscanCatalogue> CompileVectorscanCatalogue(
    const std::vector<std::string>& re2_patterns, unsigned int mode_flags) {
  VectorscanCatalogue catalogue;
  std::vector<VectorscanPattern> translated;
  std::vector<const char*> expressions;
  std::vector<unsigned int> flags;
  std::vector<unsigned int> ids;
  translated.reserve(re2_patterns.size());
  // hs_compile_multi names only the first pattern it refuses: each is compiled alone first, so
  // that all refusals are listed and the rest still compile.
  for (size_t i = 0; i < re2_patterns.size(); ++i) {
    translated.push_back(Re2ToVectorscan(re2_patterns[i]));
    const VectorscanPattern& t = translated.back();
    const unsigned int f = t.flags | mode_flags | HS_FLAG_PREFILTER;
    const std::string error = CompileError(t.expression.c_str(), f);
    if (!error.empty()) {
      catalogue.refused.push_back({static_cast<int>(i), re2_patterns[i], error});
      continue;
    }
    if (!CompileError(t.expression.c_str(), f & ~HS_FLAG_PREFILTER).empty()) {
      catalogue.inexact.push_back(static_cast<int>(i));
    }
    catalogue.ids.push_back(static_cast<int>(i));
    expressions.push_back(t.expression.c_str());
    flags.push_back(f);
    ids.push_back(static_cast<unsigned int>(i));
  }
  if (expressions.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vectorscan: none of the ", re2_patterns.size(), " patterns compiles"));
  }
  hs_database_t* db = nullptr;
  hs_compile_error_t* error = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const hs_error_t rc = hs_compile_multi(expressions.data(), flags.data(), ids.data(),
                                         static_cast<unsigned int>(expressions.size()),
                                         HS_MODE_BLOCK, nullptr, &db, &error);
  catalogue.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (rc != HS_SUCCESS) {
    std::string message = error != nullptr && error->message != nullptr ? error->message : "";
    const int at = error != nullptr ? error->expression : -1;
    hs_free_compile_error(error);
    return absl::InternalError(absl::StrCat("vectorscan: the catalogue does not compile (pattern ",
                                            at >= 0 ? catalogue.ids[static_cast<size_t>(at)] : at,
                                            "): ", message));
  }
  catalogue.database.reset(db);
  return catalogue;
}

absl::StatusOr<PrefilterDatabase> BuildPrefilterDatabase(
    const std::vector<std::string>& re2_patterns, bool portable) {
  PrefilterDatabase out;
  std::vector<std::string> expressions;
  std::vector<unsigned int> flags;
  std::vector<unsigned int> ids;
  for (size_t i = 0; i < re2_patterns.size(); ++i) {
    VectorscanPattern t = Re2ToVectorscan(re2_patterns[i]);
    t.expression = TrimTrailingRepeats(t.expression);
    unsigned int f = t.flags | HS_FLAG_MULTILINE;
    if (!CompileError(t.expression.c_str(), f).empty()) {
      f |= HS_FLAG_PREFILTER;
      const std::string error = CompileError(t.expression.c_str(), f);
      if (!error.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("vectorscan: pattern ", i, " (", re2_patterns[i], "): ", error));
      }
      out.confirm.push_back(static_cast<int>(i));
    }
    expressions.push_back(std::move(t.expression));
    flags.push_back(f);
    ids.push_back(static_cast<unsigned int>(i));
  }
  if (expressions.empty()) return absl::InvalidArgumentError("vectorscan: no patterns");
  std::vector<const char*> pointers;
  for (const std::string& e : expressions) pointers.push_back(e.c_str());
  hs_platform_info_t platform{};
  if (!portable && hs_populate_platform(&platform) != HS_SUCCESS) {
    return absl::InternalError("vectorscan: cannot read this CPU's features");
  }
  hs_database_t* db = nullptr;
  hs_compile_error_t* error = nullptr;
  if (hs_compile_multi(pointers.data(), flags.data(), ids.data(),
                       static_cast<unsigned int>(pointers.size()), HS_MODE_BLOCK, &platform, &db,
                       &error) != HS_SUCCESS) {
    std::string message = error != nullptr && error->message != nullptr ? error->message : "";
    hs_free_compile_error(error);
    return absl::InternalError(
        absl::StrCat("vectorscan: the catalogue does not compile: ", message));
  }
  HsDatabase database(db);
  char* bytes = nullptr;
  size_t length = 0;
  if (hs_serialize_database(database.get(), &bytes, &length) != HS_SUCCESS) {
    return absl::InternalError("vectorscan: cannot serialise the database");
  }
  out.serialized.assign(bytes, length);
  free(bytes);
  return out;
}

}  // namespace fleet::diagnosis

#include "bench/classifier/hs_patterns.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fleet::bench {
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

}  // namespace

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

}  // namespace fleet::bench

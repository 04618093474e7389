#include "bench/classifier/re2_to_ere.h"

#include <cctype>
#include <vector>

namespace fleet::bench {

std::string Re2ToEre(std::string_view p) {
  constexpr int kNewline = '\n';
  struct ByteSet {
    bool has[256] = {};
    void Add(int lo, int hi) {
      for (int c = lo; c <= hi; ++c) has[c] = true;
    }
    void Fold() {
      for (int c = 'a'; c <= 'z'; ++c) has[c] = has[c - 32] = has[c] || has[c - 32];
    }
    void Negate() {
      for (bool& b : has) b = !b;
    }
    int Count() const {
      int n = 0;
      for (bool b : has) n += b;
      return n;
    }
  };
  // RE2's Perl classes (ASCII only, Latin-1 mode included): \d \s \w and their negations.
  const auto perl_class = [](char escape) {
    ByteSet s;
    switch (std::tolower(static_cast<unsigned char>(escape))) {
      case 'd':
        s.Add('0', '9');
        break;
      case 's':
        for (int c : {'\t', '\n', '\f', '\r', ' '}) s.Add(c, c);
        break;
      case 'w':
        s.Add('0', '9');
        s.Add('A', 'Z');
        s.Add('a', 'z');
        s.Add('_', '_');
        break;
    }
    if (std::isupper(static_cast<unsigned char>(escape))) s.Negate();
    return s;
  };
  // Writes `set` as one ERE atom: a literal, '.', or a bracket expression whose ']' comes first,
  // '-' last and '^' not first; sets holding most bytes are written as a negation.
  const auto emit_set = [](ByteSet set, std::string* out) {
    set.has[kNewline] = false;
    const bool negated = set.Count() > 128;
    if (negated) {
      set.Negate();
      set.has[kNewline] = false;
    }
    const int members = set.Count();
    if (negated && members == 0) {
      out->push_back('.');
      return;
    }
    if (!negated && members == 1) {
      int only = 0;
      while (!set.has[only]) ++only;
      if (std::string_view(".[]()*+?{}|^$\\").find(static_cast<char>(only)) !=
          std::string_view::npos) {
        out->push_back('\\');
      }
      out->push_back(static_cast<char>(only));
      return;
    }
    const auto take = [&set](unsigned char c) {
      const bool had = set.has[c];
      set.has[c] = false;
      return had;
    };
    const bool close = take(']'), dash = take('-'), caret = take('^'), open = take('[');
    std::string body;
    if (close) body.push_back(']');
    for (int c = 0; c < 256;) {
      if (!set.has[c]) {
        ++c;
        continue;
      }
      int end = c;
      while (end + 1 < 256 && set.has[end + 1]) ++end;
      body.push_back(static_cast<char>(c));
      if (end - c >= 2) body.push_back('-');
      if (end > c) body.push_back(static_cast<char>(end));
      c = end + 1;
    }
    if (open) body.push_back('[');  // only '^', '-' or the closing ']' can follow it
    if (caret && !negated && body.empty()) {
      body = "-^";  // the set is exactly {'-', '^'}
    } else {
      if (caret) body.push_back('^');
      if (dash) body.push_back('-');
    }
    out->push_back('[');
    if (negated) out->push_back('^');
    out->append(body);
    out->push_back(']');
  };
  // One escaped or literal byte at p[*i], advancing *i; -1 when it is a Perl class (*perl set).
  const auto next_byte = [&p](size_t* i, char* perl) -> int {
    *perl = 0;
    if (p[*i] != '\\' || *i + 1 >= p.size()) return static_cast<unsigned char>(p[(*i)++]);
    const char e = p[*i + 1];
    *i += 2;
    switch (e) {
      case 'd':
      case 's':
      case 'w':
      case 'D':
      case 'S':
      case 'W':
        *perl = e;
        return -1;
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'x': {  // \xHH or \x{HH}
        const bool braced = *i < p.size() && p[*i] == '{';
        const size_t start = *i + (braced ? 1 : 0);
        const size_t len = braced ? p.find('}', start) - start : 2;
        const int value = std::stoi(std::string(p.substr(start, len)), nullptr, 16);
        *i = start + len + (braced ? 1 : 0);
        return value & 0xff;
      }
      default:
        return static_cast<unsigned char>(e);  // \. \- \] \\ ...: the character itself
    }
  };

  std::string out;
  // Case folding of each open group: (?i) sets it for the rest of its group, (?i:...) for one.
  std::vector<bool> fold = {false};
  bool after_quantifier = false;
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '?' && after_quantifier) {
      after_quantifier = false;
      ++i;  // non-greedy: the same lines match
      continue;
    }
    after_quantifier = false;
    if (c == '[') {
      ByteSet set;
      ++i;
      const bool negated = i < p.size() && p[i] == '^';
      if (negated) ++i;
      for (bool first = true; i < p.size() && (p[i] != ']' || first); first = false) {
        if (p.substr(i, 2) == "[:") {
          const size_t end = p.find(":]", i + 2);
          const std::string_view name = p.substr(i + 2, end - i - 2);
          for (int b = 0; b < 128; ++b) {
            if ((name == "alpha" && std::isalpha(b)) || (name == "digit" && std::isdigit(b)) ||
                (name == "alnum" && std::isalnum(b)) || (name == "space" && std::isspace(b)) ||
                (name == "upper" && std::isupper(b)) || (name == "lower" && std::islower(b)) ||
                (name == "punct" && std::ispunct(b)) || (name == "xdigit" && std::isxdigit(b))) {
              set.Add(b, b);
            }
          }
          i = end + 2;
          continue;
        }
        char perl;
        const int lo = next_byte(&i, &perl);
        if (perl != 0) {
          const ByteSet s = perl_class(perl);
          for (int b = 0; b < 256; ++b) set.has[b] = set.has[b] || s.has[b];
        } else if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
          ++i;
          set.Add(lo, next_byte(&i, &perl));
        } else {
          set.Add(lo, lo);
        }
      }
      ++i;                          // the closing ']'
      if (fold.back()) set.Fold();  // RE2 folds the items, then negates
      if (negated) set.Negate();
      emit_set(set, &out);
      continue;
    }
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'b' || e == 'B') {
        out.append(p.substr(i, 2));  // GNU extension, same meaning in the C locale
        i += 2;
      } else if (e == 'A' || e == 'z') {
        out.push_back(e == 'A' ? '^' : '$');
        i += 2;
      } else if (std::isalnum(static_cast<unsigned char>(e)) &&
                 std::string_view("dswDSWntrfvx").find(e) == std::string_view::npos) {
        out.append(p.substr(i, 2));  // unknown here: copied for grep to reject
        i += 2;
      } else {
        char perl;
        const int b = next_byte(&i, &perl);
        ByteSet s = perl != 0 ? perl_class(perl) : ByteSet();
        if (perl == 0) s.Add(b, b);
        if (fold.back()) s.Fold();
        emit_set(s, &out);
      }
      continue;
    }
    if (c == '(') {
      if (p.substr(i, 4) == "(?i)") {
        fold.back() = true;
        i += 4;
        continue;
      }
      bool group_fold = fold.back();
      if (p.substr(i, 4) == "(?i:") {
        group_fold = true;
        i += 4;
      } else if (p.substr(i, 3) == "(?:") {
        i += 3;
      } else if (p.substr(i, 4) == "(?P<" || p.substr(i, 3) == "(?<") {
        i = p.find('>', i) + 1;
      } else {
        ++i;
      }
      fold.push_back(group_fold);
      out.push_back('(');
      continue;
    }
    if (c == ')') {
      if (fold.size() > 1) fold.pop_back();
      out.push_back(')');
      ++i;
      continue;
    }
    if (c == '*' || c == '+' || c == '?') {
      out.push_back(c);
      after_quantifier = true;
      ++i;
      continue;
    }
    if (c == '{') {
      // A repetition ({n}, {n,}, {n,m}); anything else is a literal brace, in RE2 as in grep.
      const size_t close = p.find('}', i);
      const std::string_view inner =
          close == std::string_view::npos ? "" : p.substr(i + 1, close - i - 1);
      const bool repetition = !inner.empty() &&
                              std::isdigit(static_cast<unsigned char>(inner[0])) &&
                              inner.find_first_not_of("0123456789,") == std::string_view::npos &&
                              inner.find(',') == inner.rfind(',');
      if (repetition) {
        out.append(p.substr(i, close - i + 1));
        after_quantifier = true;
        i = close + 1;
      } else {
        out.append("\\{");
        ++i;
      }
      continue;
    }
    if (fold.back() && std::isalpha(static_cast<unsigned char>(c))) {
      ByteSet s;
      s.Add(static_cast<unsigned char>(c), static_cast<unsigned char>(c));
      s.Fold();
      emit_set(s, &out);
      ++i;
      continue;
    }
    out.push_back(c);  // other literals, '.', '|', '^', '$'
    ++i;
  }
  return out;
}

}  // namespace fleet::bench

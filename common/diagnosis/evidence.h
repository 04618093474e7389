// Evidence: the lines of a failing unit, with their original line numbers, bounded.
//
// Over the cap the middle is elided and an elision entry says how many lines (line 0, text
// "[... N lines elided ...]"); key lines (root causes, symptoms) are kept even from the middle,
// so a cap never hides the error line. Each line's text is cut past kMaxLineBytes, keeping its
// start and end. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace fleet::diagnosis {

struct EvidenceLine {
  int64_t line = 0;  // 1-based; 0 marks an elision entry
  std::string text;
};

class EvidenceBuilder {
 public:
  static constexpr size_t kMaxLineBytes = 8192;

  // `max_lines` bounds the result (elision entries not counted); at least 8.
  explicit EvidenceBuilder(size_t max_lines = 200);

  // Lines must come in increasing line order, each at most once.
  void Add(int64_t line, std::string_view text, bool key);
  std::vector<EvidenceLine> Build() const;
  bool empty() const { return head_.empty(); }
  int64_t first_line() const { return head_.empty() ? 0 : head_.front().line; }

  // Cuts `text` to kMaxLineBytes, keeping start and end around a "[... N bytes cut ...]" marker,
  // and drops a trailing '\r'.
  static std::string ClipLine(std::string_view text);

 private:
  size_t head_cap_;
  size_t tail_cap_;
  size_t key_cap_;
  std::vector<EvidenceLine> head_;
  std::vector<EvidenceLine> middle_keys_;
  std::deque<EvidenceLine> tail_;
  // The tail's lines flagged key, in the same order (a deque of bools is wasteful but tiny here).
  std::deque<bool> tail_key_;
};

}  // namespace fleet::diagnosis

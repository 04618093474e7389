// TextTable: the aligned, column-per-field tables of fleetctl's human output (`status`,
// `attempts`, `restart`). Columns are padded to their widest cell (counted in characters, not
// bytes); the last column is not padded. A cell may carry an ANSI colour, written only when
// Render is asked for colour, so alignment never depends on escape codes.
//
// Fitting a width: a table that is wider than Render's `max_width` first narrows the columns its
// shrink order names, one step at a time, by eliding the middle of their cells ("batch_pre…sm120":
// the start and the end of an op or server name are the parts that tell two apart); a cell with a
// `narrow` form shows that instead when it fits. Only what still overflows is cut at the right
// edge. Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fleet::cli {

// A cell's text: `s`, or "-" when it is empty.
inline std::string OrDash(std::string_view s) { return s.empty() ? "-" : std::string(s); }

class TextTable {
 public:
  struct Cell {
    Cell(std::string t) : text(std::move(t)) {}  // NOLINT: a plain string is a plain cell
    Cell(const char* t) : text(t) {}             // NOLINT
    Cell(std::string t, std::string_view c) : text(std::move(t)), color(c) {}
    std::string text;
    std::string_view color;  // an SGR sequence such as "\x1b[32m"; empty: none
    // Shown instead of `text` when the column is narrower than `text` and this fits ("" : none).
    std::string narrow;
    // Narrowed, `text` keeps its start and loses its end ("remediation 7, 1m20s: pip inst…"),
    // for a text whose start says what it is; else it loses its middle.
    bool elide_end = false;
  };

  // One step of narrowing: `column` gives up room down to `min_width` characters.
  struct Shrink {
    size_t column;
    size_t min_width;
  };

  explicit TextTable(std::vector<std::string> header);

  void AddRow(std::vector<Cell> row);
  size_t rows() const { return rows_.size(); }

  // The steps Render takes, in order, while a row is wider than its `max_width`. Empty (the
  // default): no column is narrowed, lines are only cut.
  void SetShrinkOrder(std::vector<Shrink> order) { shrink_ = std::move(order); }

  // The header and the rows, one line each, ending in '\n'. `max_width` > 0 fits every line into
  // that many characters (a terminal that wraps would break an in-place redraw): the shrink order
  // first, then a cut at the right edge; 0: no limit, every text whole.
  std::string Render(bool color, size_t max_width = 0) const;

 private:
  std::vector<std::vector<Cell>> rows_;  // rows_[0] is the header
  std::vector<Shrink> shrink_;
};

// Characters (UTF-8 code points) in `s`.
size_t DisplayWidth(std::string_view s);

// `s` in at most `width` characters: whole when it fits, else its start and its end around "…"
// (one character), the start getting the odd one.
std::string ElideMiddle(std::string_view s, size_t width);
// The same keeping only the start: "remediation 7, 1m…".
std::string ElideEnd(std::string_view s, size_t width);

}  // namespace fleet::cli

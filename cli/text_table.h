// TextTable: the aligned, column-per-field tables of fleetctl's human output (`status`,
// `attempts`, `restart`). Columns are padded to their widest cell (counted in characters, not
// bytes); the last column is not padded. A cell may carry an ANSI colour, written only when
// Render is asked for colour, so alignment never depends on escape codes. Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fleet::cli {

class TextTable {
 public:
  struct Cell {
    Cell(std::string t) : text(std::move(t)) {}  // NOLINT: a plain string is a plain cell
    Cell(const char* t) : text(t) {}             // NOLINT
    Cell(std::string t, std::string_view c) : text(std::move(t)), color(c) {}
    std::string text;
    std::string_view color;  // an SGR sequence such as "\x1b[32m"; empty: none
  };

  explicit TextTable(std::vector<std::string> header);

  void AddRow(std::vector<Cell> row);
  size_t rows() const { return rows_.size(); }

  // The header and the rows, one line each, ending in '\n'. `max_width` > 0 cuts every line to
  // that many characters (a terminal that wraps would break an in-place redraw); 0: no limit.
  std::string Render(bool color, size_t max_width = 0) const;

 private:
  std::vector<std::vector<Cell>> rows_;  // rows_[0] is the header
};

// Characters (UTF-8 code points) in `s`.
size_t DisplayWidth(std::string_view s);

}  // namespace fleet::cli

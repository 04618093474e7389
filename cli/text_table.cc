#include "cli/text_table.h"

#include <algorithm>

namespace fleet::cli {
namespace {

constexpr std::string_view kReset = "\x1b[0m";
constexpr std::string_view kEllipsis = "\xe2\x80\xa6";  // U+2026, one character wide
constexpr size_t kGap = 2;

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The longest prefix of `s` with at most `width` characters.
std::string_view Prefix(std::string_view s, size_t width) {
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (IsContinuation(s[i])) continue;
    if (chars == width) return s.substr(0, i);
    ++chars;
  }
  return s;
}

// The longest suffix of `s` with at most `width` characters.
std::string_view Suffix(std::string_view s, size_t width) {
  if (width == 0) return s.substr(s.size());
  size_t chars = 0;
  for (size_t i = s.size(); i-- > 0;) {
    if (IsContinuation(s[i])) continue;
    if (++chars == width) return s.substr(i);
  }
  return s;
}

// What a cell shows in a column `width` characters wide.
std::string Fit(const TextTable::Cell& cell, size_t width) {
  if (DisplayWidth(cell.text) <= width) return cell.text;
  if (!cell.narrow.empty() && DisplayWidth(cell.narrow) <= width) return cell.narrow;
  return cell.elide_end ? ElideEnd(cell.text, width) : ElideMiddle(cell.text, width);
}

}  // namespace

size_t DisplayWidth(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return !IsContinuation(c); }));
}

std::string ElideMiddle(std::string_view s, size_t width) {
  if (DisplayWidth(s) <= width) return std::string(s);
  if (width == 0) return "";
  const size_t kept = width - 1;
  const size_t back = kept / 2;
  std::string out(Prefix(s, kept - back));
  out += kEllipsis;
  out += Suffix(s, back);
  return out;
}

std::string ElideEnd(std::string_view s, size_t width) {
  if (DisplayWidth(s) <= width) return std::string(s);
  if (width == 0) return "";
  std::string out(Prefix(s, width - 1));
  out += kEllipsis;
  return out;
}

TextTable::TextTable(std::vector<std::string> header) {
  std::vector<Cell> row;
  for (std::string& h : header) row.emplace_back(std::move(h));
  rows_.push_back(std::move(row));
}

void TextTable::AddRow(std::vector<Cell> row) {
  row.resize(rows_[0].size(), Cell(""));
  rows_.push_back(std::move(row));
}

std::string TextTable::Render(bool color, size_t max_width) const {
  const size_t columns = rows_[0].size();
  std::vector<size_t> widths(columns, 0);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < columns; ++c) {
      widths[c] = std::max(widths[c], DisplayWidth(row[c].text));
    }
  }
  if (max_width > 0) {
    size_t total = kGap * (columns - 1);
    for (size_t w : widths) total += w;
    for (const Shrink& step : shrink_) {
      if (total <= max_width) break;
      if (step.column >= columns || widths[step.column] <= step.min_width) continue;
      const size_t give = std::min(total - max_width, widths[step.column] - step.min_width);
      widths[step.column] -= give;
      total -= give;
    }
  }
  std::string out;
  for (const auto& row : rows_) {
    size_t used = 0;  // characters on this line so far
    std::string line;
    for (size_t c = 0; c < columns; ++c) {
      const bool last = c + 1 == columns;
      std::string fitted = max_width == 0 ? row[c].text : Fit(row[c], widths[c]);
      std::string_view text = fitted;
      const size_t width = DisplayWidth(text);
      size_t room = max_width == 0 ? width : (used >= max_width ? 0 : max_width - used);
      if (width > room) text = Prefix(text, room);
      const size_t shown = std::min(width, room);
      const bool colored = color && !row[c].color.empty() && !text.empty();
      if (colored) line += row[c].color;
      line += text;
      if (colored) line += kReset;
      used += shown;
      if (last) break;
      size_t pad = widths[c] - shown + kGap;
      if (max_width != 0) pad = std::min(pad, used >= max_width ? 0 : max_width - used);
      line.append(pad, ' ');
      used += pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace fleet::cli

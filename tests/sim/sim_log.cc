#include "tests/sim/sim_log.h"

#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::sim {
namespace {

// Writes all of `text` (one record); a log that cannot be written is not worth failing the
// simulation for.
void WriteRecord(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

std::string LogTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

void SimLog::Record(std::string_view message) const {
  std::string line =
      absl::StrCat("[", LogTimestamp(), prefix_.empty() ? "" : " ", prefix_, "] ", AsAbsl(message));
  if (line.back() != '\n') line.push_back('\n');
  WriteRecord(fd_, line);
}

void SimLog::Redraw(std::string_view state, bool close) const {
  WriteRecord(fd_, absl::StrCat("\r", AsAbsl(state), close ? "\n" : ""));
}

VllmLog::VllmLog(int fd, std::string process, int pid)
    : fd_(fd), prefix_(absl::StrCat("(", process, " pid=", pid, ") ")) {}

void VllmLog::WriteLines(std::string_view head, std::string_view text) const {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    absl::StrAppend(&out, AsAbsl(head), AsAbsl(text.substr(start, end - start)), "\n");
    start = end + 1;
  }
  if (out.empty()) out = absl::StrCat(AsAbsl(head), "\n");
  WriteRecord(fd_, out);
}

void VllmLog::Log(std::string_view level, std::string_view source, std::string_view message) const {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char time[32];
  std::strftime(time, sizeof(time), "%m-%d %H:%M:%S", &local);
  WriteLines(absl::StrCat(prefix_, AsAbsl(level), " ", time, " [", AsAbsl(source), "] "), message);
}

void VllmLog::Print(std::string_view text) const { WriteLines(prefix_, text); }

void VllmLog::Raw(std::string_view text) const {
  std::string out(text);
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  WriteRecord(fd_, out);
}

void VllmLog::Redraw(std::string_view state, bool close) const {
  WriteRecord(fd_, absl::StrCat("\r", AsAbsl(state), close ? "\n" : ""));
}

void SimLog::Raw(std::string_view text) const {
  std::string out(text);
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  WriteRecord(fd_, out);
}

}  // namespace fleet::sim

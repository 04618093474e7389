// SimLog: writes SGLang-style log records ("[2026-11-29 17:00:01 TP0] message") to one file
// descriptor. The simulated launcher and its scheduler children share that descriptor (the
// server's log file, as with the real server), so every record goes out in a single write(2):
// records of different processes never interleave inside a line, and their order is the order of
// the writes. Not thread-safe; each process of the simulator is single-threaded.
#pragma once

#include <string>
#include <string_view>

namespace fleet::sim {

class SimLog {
 public:
  // `prefix` follows the timestamp inside the brackets: "" for the launcher, "TP0" for rank 0.
  explicit SimLog(int fd, std::string prefix = "") : fd_(fd), prefix_(std::move(prefix)) {}

  // One record: "[<time>< prefix>] <message>\n". A multi-line message (a traceback) stays one
  // record, as Python's logging writes it.
  void Record(std::string_view message) const;
  // `text` as it is (newline added when missing): output of a tool (ninja, uvicorn's own lines).
  void Raw(std::string_view text) const;
  // A terminal redraw, as tqdm writes its progress bar to a file: "\r" and `state`, no newline
  // (`close` adds the one tqdm writes when the bar is done).
  void Redraw(std::string_view state, bool close = false) const;

 private:
  int fd_;
  std::string prefix_;
};

// The current local time as SGLang's log records show it: "2026-11-29 17:00:01".
std::string LogTimestamp();

}  // namespace fleet::sim

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

// VllmLog: the records of one process of `vllm serve` (vLLM V1) as it writes them. vLLM decorates
// every line a process writes (logger records, each line of a multi-line record, what Python
// prints on stderr) with the process's prefix, "(EngineCore_DP0 pid=294) "; a logger record adds
// level, time and source: "(APIServer pid=7) INFO 12-03 11:20:01 [api_server.py:1839] message".
// Output of child tools (ninja) reaches the file undecorated. Each record is one write(2), as with
// SimLog. Not thread-safe.
class VllmLog {
 public:
  // `process` is "APIServer", "EngineCore_DP0" or "Worker_TP1"; `pid` the process it speaks for.
  VllmLog(int fd, std::string process, int pid);

  // A logger record: `level` "INFO", "WARNING" or "ERROR"; `source` "core.py:708".
  void Log(std::string_view level, std::string_view source, std::string_view message) const;
  void Info(std::string_view source, std::string_view message) const {
    Log("INFO", source, message);
  }
  // Text the process prints without its logger (uvicorn's lines, a traceback on stderr).
  void Print(std::string_view text) const;
  // Undecorated text (a tool's output), newline added when missing.
  void Raw(std::string_view text) const;
  // A tqdm redraw ("\r" and `state`), undecorated as tqdm writes it; `close` ends the line.
  void Redraw(std::string_view state, bool close = false) const;

 private:
  // Every line of `text` with `head` in front.
  void WriteLines(std::string_view head, std::string_view text) const;

  int fd_;
  std::string prefix_;  // "(EngineCore_DP0 pid=294) "
};

// The current local time as SGLang's log records show it: "2026-11-29 17:00:01".
std::string LogTimestamp();

}  // namespace fleet::sim

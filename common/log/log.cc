#include "common/log/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/rotating_file_sink.h"

namespace fleet::log {
namespace {

constexpr Component kComponents[] = {
    Component::kAgent, Component::kStore,       Component::kGpu, Component::kDaemon,
    Component::kLinks, Component::kRemediation, Component::kSsh, Component::kDiagnosis};
constexpr size_t kComponentCount = sizeof(kComponents) / sizeof(kComponents[0]);

constexpr char kTimestampedPattern[] = "%Y-%m-%dT%H:%M:%S.%eZ %l %n: %v";
// '*' is SyslogPriority: journald reads "<N>" at the start of a line as its priority.
constexpr char kJournalPattern[] = "<%*>%l %n: %v";

// The syslog priority of a level (sd-daemon(3)'s prefixes).
class SyslogPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    char priority = '6';
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug:
        priority = '7';
        break;
      case spdlog::level::info:
        priority = '6';
        break;
      case spdlog::level::warn:
        priority = '4';
        break;
      case spdlog::level::err:
        priority = '3';
        break;
      default:
        priority = '2';
        break;
    }
    dest.push_back(priority);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriority>();
  }
};

std::unique_ptr<spdlog::formatter> Formatter(bool journal) {
  auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  if (journal) {
    f->add_flag<SyslogPriority>('*').set_pattern(kJournalPattern);
  } else {
    f->set_pattern(kTimestampedPattern);
  }
  return f;
}

// One write(2) per line, unbuffered: a reader waiting for a line (a test, a deploy script) sees
// it whole or not at all, and lines of processes sharing the stream do not interleave.
class FdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FdSink(int fd) : fd_(fd) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere to say it
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  const int fd_;
};

std::shared_ptr<spdlog::sinks::sink> StreamSink(int fd) {
  auto sink = std::make_shared<FdSink>(fd);
  sink->set_formatter(Formatter(IsJournalStream(fd)));
  return sink;
}

struct Loggers {
  Loggers() {
    const std::shared_ptr<spdlog::sinks::sink> sink = StreamSink(STDERR_FILENO);
    for (size_t i = 0; i < kComponentCount; ++i) {
      loggers[i] = std::make_shared<spdlog::logger>(ComponentName(kComponents[i]), sink);
      loggers[i]->set_level(spdlog::level::info);
      try {
        spdlog::register_logger(loggers[i]);
      } catch (const spdlog::spdlog_ex&) {
        // A logger of that name registered by someone else: ours still works, unregistered.
      }
    }
  }
  std::array<std::shared_ptr<spdlog::logger>, kComponentCount> loggers;
};

Loggers& All() {
  static Loggers* const loggers = new Loggers();  // never destroyed: logging works at exit
  return *loggers;
}

}  // namespace

const char* ComponentName(Component component) {
  switch (component) {
    case Component::kAgent:
      return "agent";
    case Component::kStore:
      return "store";
    case Component::kGpu:
      return "gpu";
    case Component::kDaemon:
      return "daemon";
    case Component::kLinks:
      return "links";
    case Component::kRemediation:
      return "remediation";
    case Component::kSsh:
      return "ssh";
    case Component::kDiagnosis:
      return "diagnosis";
  }
  std::abort();
}

spdlog::logger& Get(Component component) { return *All().loggers[static_cast<size_t>(component)]; }

absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view text) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (const auto& [name, level] : kLevels) {
    if (std::string_view(text.data(), text.size()) == name) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", text, "' is not one of trace, debug, info, warn, error, off"));
}

bool IsJournalStream(int fd) {
  const char* value = std::getenv("JOURNAL_STREAM");
  if (value == nullptr) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(value, ':');
  uint64_t device = 0;
  uint64_t inode = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &device) ||
      !absl::SimpleAtoi(parts[1], &inode)) {
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  return static_cast<uint64_t>(st.st_dev) == device && static_cast<uint64_t>(st.st_ino) == inode;
}

absl::Status InitLogging(const LogOptions& options) {
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (options.file.empty()) {
    sink = StreamSink(options.stream_fd);
  } else {
    if (options.max_file_bytes <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("log file ", options.file, ": the size it rotates at must be positive"));
    }
    if (options.max_files < 0 || options.max_files > 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("log file ", options.file, ": files kept must be within 0..1000"));
    }
    spdlog::file_event_handlers handlers;
    // Created 0600 before spdlog opens it (fopen would make it 0666 less the umask), and narrowed
    // to 0600 if it existed wider: a log names servers, paths and errors.
    handlers.before_open = [](const spdlog::filename_t& name) {
      const int fd = open(name.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) close(fd);
    };
    const bool capture = options.capture_stdio;
    handlers.after_open = [capture](const spdlog::filename_t&, std::FILE* file) {
      const int fd = fileno(file);
      fchmod(fd, 0600);
      if (capture) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
    };
    try {
      sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          options.file, static_cast<size_t>(options.max_file_bytes),
          static_cast<size_t>(options.max_files), /*rotate_on_open=*/false, handlers);
    } catch (const spdlog::spdlog_ex& e) {
      return absl::InvalidArgumentError(absl::StrCat("log file ", options.file, ": ", e.what()));
    }
    sink->set_formatter(Formatter(/*journal=*/false));
  }
  for (const std::shared_ptr<spdlog::logger>& logger : All().loggers) {
    logger->sinks().assign(1, sink);
    logger->set_level(options.level);
    // A file's lines are written out one by one: whoever reads the log, or a crash, sees them.
    logger->flush_on(spdlog::level::trace);
  }
  return absl::OkStatus();
}

}  // namespace fleet::log

#include "agent/readiness.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::agent {
namespace {

constexpr char kHelperName[] = "fleet-http-probe";

// Time the helper gets beyond its requests' own timeouts: exec and start-up, on a machine busy
// compiling kernels.
constexpr absl::Duration kHelperStartAllowance = absl::Seconds(5);

// At most this much of an unexpected helper output goes into a detail.
constexpr size_t kMaxOutputInDetail = 200;

std::string Excerpt(std::string_view output) {
  std::string out(AsStd(absl::StripAsciiWhitespace(AsAbsl(output))).substr(0, kMaxOutputInDetail));
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

}  // namespace

absl::StatusOr<ReadinessResult> ParseReadinessLine(std::string_view line) {
  const size_t newline = line.find('\n');
  if (newline != std::string_view::npos) line = line.substr(0, newline);
  ReadinessResult result;
  std::string_view rest;
  if (line.starts_with("ready ")) {
    result.ready = true;
    rest = line.substr(6);
  } else if (line.starts_with("not-ready ")) {
    rest = line.substr(10);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("readiness line '", Excerpt(line), "': neither ready nor not-ready"));
  }
  const size_t space = rest.find(' ');
  const std::string_view status = rest.substr(0, space);
  if (!absl::SimpleAtoi(AsAbsl(status), &result.http_status) || result.http_status < 0 ||
      result.http_status > 999) {
    return absl::InvalidArgumentError(
        absl::StrCat("readiness line '", Excerpt(line), "': no HTTP status"));
  }
  if (space != std::string_view::npos) result.detail = std::string(rest.substr(space + 1));
  return result;
}

ProcessReadinessProber::ProcessReadinessProber(std::string helper, CommandRunner* runner)
    : helper_(std::move(helper)), runner_(runner) {}

std::string ProcessReadinessProber::HelperNextToExecutable() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  const std::string_view self(exe, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  if (slash == std::string_view::npos) return "";
  return absl::StrCat(AsAbsl(self.substr(0, slash + 1)), kHelperName);
}

ReadinessResult ProcessReadinessProber::Check(const ReadinessCheck& check) {
  Command command;
  command.argv = {helper_,
                  "--host",
                  check.host,
                  "--port",
                  absl::StrCat(check.port),
                  "--path",
                  check.path,
                  "--timeout-ms",
                  absl::StrCat(absl::ToInt64Milliseconds(check.timeout))};
  if (check.completion_check) command.argv.push_back("--completion-check");
  // The helper needs nothing from the environment; leaving the agent's out keeps settings meant
  // for other programs (proxies, resolver) away from a loopback request.
  command.env = {{"PATH", "/usr/bin:/bin"}};
  const int requests = check.completion_check ? 3 : 1;  // health, models, completion
  command.timeout = requests * check.timeout + kHelperStartAllowance;

  ReadinessResult result;
  absl::StatusOr<CommandResult> run = runner_->Run(command);
  if (!run.ok()) {
    result.detail = absl::StrCat("readiness helper: ", run.status().message());
    return result;
  }
  if (run->timed_out) {
    result.detail = absl::StrCat("readiness helper ", helper_, ": killed after ",
                                 absl::FormatDuration(command.timeout));
    return result;
  }
  if (!run->exited) {
    result.detail = absl::StrCat("readiness helper ", helper_, ": killed by signal ", run->signal);
    return result;
  }
  if (run->exit_code != 0 && run->exit_code != 1) {
    result.detail = absl::StrCat("readiness helper ", helper_, ": exit ", run->exit_code, ": ",
                                 Excerpt(run->output));
    return result;
  }
  absl::StatusOr<ReadinessResult> parsed = ParseReadinessLine(run->output);
  if (!parsed.ok() || parsed->ready != (run->exit_code == 0)) {
    result.detail = absl::StrCat("readiness helper ", helper_, ": exit ", run->exit_code,
                                 " with unexpected output '", Excerpt(run->output), "'");
    return result;
  }
  return *std::move(parsed);
}

}  // namespace fleet::agent

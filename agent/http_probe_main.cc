// fleet-http-probe: one readiness check of an inference server over HTTP (HttpReadinessProber,
// a plain-socket HTTP/1.1 client). fleet-agent runs it for each check (ProcessReadinessProber,
// readiness.h): a check that hangs or crashes costs a short-lived process, not the agent. Linked
// fully static, like the agent, so it runs in the users' older containers. Prints one line and
// exits:
//   ready STATUS                  0
//   not-ready STATUS DETAIL       1   (STATUS 0: no HTTP answer)
//   a usage error on stderr       2
#include <signal.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/http_readiness_prober.h"
#include "common/base/flag_set.h"
#include "common/base/version.h"

namespace {

constexpr char kSummary[] =
    "One readiness check of an inference server, for fleet-agent: GET PATH on HOST:PORT must\n"
    "answer 200; with --completion-check (vLLM), a one-token completion must succeed too. Prints\n"
    "'ready STATUS' and exits 0, or 'not-ready STATUS DETAIL' and exits 1 (STATUS 0: no HTTP\n"
    "answer); exits 2 on a usage error.";

int Usage(const std::string& message) {
  std::cerr << "fleet-http-probe: " << message << " (see --help)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  fleet::agent::ReadinessCheck check;
  int64_t port = 0;
  int64_t timeout_ms = absl::ToInt64Milliseconds(check.timeout);
  bool version = false;
  fleet::FlagSet flags("fleet-http-probe --port N [flags]", kSummary);
  flags.AddString("host", '\0', &check.host, "the server's IP address, or localhost", "HOST");
  flags.AddInt("port", '\0', &port, "the server's port (required)");
  flags.AddString("path", '\0', &check.path, "the health endpoint", "PATH");
  flags.AddBool("completion-check", '\0', &check.completion_check,
                "after the health check, a one-token completion (vLLM)");
  flags.AddInt("timeout-ms", '\0', &timeout_ms, "timeout of each HTTP request, in milliseconds",
               "MS");
  flags.AddBool("version", '\0', &version, "print the version and exit");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Usage(std::string(s.message()));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (version) {
    std::cout << "fleet-http-probe " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  if (!flags.positional().empty()) {
    return Usage("unexpected argument '" + flags.positional()[0] + "'");
  }
  if (port < 1 || port > 65535) return Usage("--port must be 1..65535");
  if (timeout_ms < 1) return Usage("--timeout-ms must be positive");
  if (check.path.empty() || check.path[0] != '/') return Usage("--path must start with '/'");
  if (check.host.empty()) return Usage("--host must not be empty");
  check.port = static_cast<int>(port);
  check.timeout = absl::Milliseconds(timeout_ms);

  signal(SIGPIPE, SIG_IGN);  // a server that closes early is an answer, not a reason to die
  fleet::agent::HttpReadinessProber prober;
  const fleet::agent::ReadinessResult result = prober.Check(check);
  std::string line = result.ready ? "ready " : "not-ready ";
  line += std::to_string(result.http_status);
  if (!result.ready && !result.detail.empty()) {
    // One line, whatever the detail holds.
    line += ' ';
    for (char c : result.detail) line += (c == '\n' || c == '\r') ? ' ' : c;
  }
  std::cout << line << "\n";
  return result.ready ? 0 : 1;
}

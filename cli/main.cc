// fleetctl: the command-line client of gpu-fleet. Parses the verb and hands over to its command.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/attempts_command.h"
#include "cli/certs_command.h"
#include "cli/completion_command.h"
#include "cli/control_command.h"
#include "cli/deploy_command.h"
#include "cli/events_command.h"
#include "cli/explain_command.h"
#include "cli/global_flags.h"
#include "cli/hosts_command.h"
#include "cli/logs_command.h"
#include "cli/remediation_command.h"
#include "cli/status_command.h"
#include "common/base/clock.h"
#include "common/base/version.h"

namespace {

constexpr char kUsage[] =
    "usage: fleetctl [--version] [--help] [--socket PATH | --state-dir DIR | --server ADDR...\n"
    "                [--tls-cert F --tls-key F --tls-ca F | --insecure]] [--timeout D] VERB "
    "[flags] [args]\n"
    "\n"
    "Supervises LLM inference servers (SGLang, vLLM), one per GPU, across Proxmox LXC containers.\n"
    "\n"
    "verbs:\n"
    "  explain FILE...|-         name the root cause of a failed start from its log (no daemon)\n"
    "  explain --server SERVER   stored evidence of a server's attempt\n"
    "  deploy [-f FILE]          send a fleet config to fleetd and start what it describes\n"
    "  status [--watch] [--until-ready] [-o table|wide|json|name]\n"
    "                            servers, states, phases, last diagnosis\n"
    "  logs SERVER [-f]          a server's log, by attempt\n"
    "  attempts [SERVER]         the history of start attempts\n"
    "  events [-f] [--since N] [-o json]\n"
    "                            the fleet's events (state changes, attempts, fixes)\n"
    "  plan SERVER               the remediation the planner has for a server\n"
    "  apply PLAN_ID             apply a proposed plan and wait for it (policy mode 'ask')\n"
    "  remediations [SERVER|CONTAINER]\n"
    "                            the recorded remediations and their outcomes\n"
    "  restart SERVER|--all      restart servers\n"
    "  stop SERVER|--all         stop servers\n"
    "  hosts [list]              the configured hosts, their reach and recorded SSH keys\n"
    "  hosts trust HOST [--fingerprint FP]\n"
    "                            show a Proxmox host's SSH key; with FP, record it\n"
    "  certs init [--agents NAME,...] [--listen-names NAME,...] [--clients NAME,...]\n"
    "                            create the fleet CA and the mutual-TLS certificates\n"
    "  completion bash           a bash completion script\n"
    "\n"
    "SERVER is host/ctid/gpuN (pve1/200/gpu3; the local host is 'local').\n"
    "Run 'fleetctl VERB --help' for a verb's flags; docs/cli.md has every output format.\n"
    "\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<fleet::cli::GlobalFlags> global =
      fleet::cli::ParseGlobalFlags(&args, fleet::cli::GlobalEnvFromProcess());
  if (!global.ok()) {
    std::cerr << "fleetctl: " << global.status().message() << "\n";
    return 1;
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage << fleet::cli::kGlobalFlagsHelp;
    return args.empty() ? 1 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::cout << "fleetctl " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  const std::string verb = args[0];
  args.erase(args.begin());

  fleet::RealClock clock;
  fleet::cli::CommandContext ctx;
  ctx.socket_path = global->socket_path;
  ctx.servers = global->servers;
  ctx.timeout = global->timeout;
  ctx.stdout_is_tty = isatty(STDOUT_FILENO) != 0;
  const char* no_color = std::getenv("NO_COLOR");
  ctx.no_color = no_color != nullptr && no_color[0] != '\0';
  ctx.time_zone = absl::LocalTimeZone();
  ctx.redraw_interval = absl::Seconds(1);
  ctx.remediation_poll_interval = absl::Seconds(5);
  if (ctx.stdout_is_tty) {
    // The terminal's own width, else $COLUMNS (a terminal that does not answer TIOCGWINSZ), asked
    // again at each redraw so a resized window is fitted. Off a terminal: whole lines.
    ctx.query_terminal_width = [] {
      if (struct winsize ws; ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
        return static_cast<int>(ws.ws_col);
      }
      int columns = 0;
      const char* env = std::getenv("COLUMNS");
      if (env != nullptr && absl::SimpleAtoi(env, &columns) && columns > 0) return columns;
      return 0;
    };
    ctx.terminal_width = ctx.query_terminal_width();
  }
  ctx.clock = &clock;
  ctx.out = &std::cout;
  ctx.err = &std::cerr;

  if (verb == "explain") return fleet::cli::RunExplain(args, ctx);
  if (verb == "deploy") return fleet::cli::RunDeploy(args, ctx);
  if (verb == "status") return fleet::cli::RunStatus(args, ctx);
  if (verb == "attempts") return fleet::cli::RunAttempts(args, ctx);
  if (verb == "logs") return fleet::cli::RunLogs(args, ctx);
  if (verb == "events") return fleet::cli::RunEvents(args, ctx);
  if (verb == "restart") return fleet::cli::RunRestart(args, ctx);
  if (verb == "stop") return fleet::cli::RunStop(args, ctx);
  if (verb == "plan") return fleet::cli::RunPlan(args, ctx);
  if (verb == "apply") return fleet::cli::RunApply(args, ctx);
  if (verb == "remediations") return fleet::cli::RunRemediations(args, ctx);
  if (verb == "hosts") return fleet::cli::RunHosts(args, ctx);
  if (verb == "certs") return fleet::cli::RunCerts(args, ctx);
  if (verb == "completion") return fleet::cli::RunCompletion(args, ctx);
  std::cerr << "fleetctl: unknown verb '" << verb << "' (see fleetctl --help)\n";
  return 1;
}

#include "cli/logs_command.h"

#include <ostream>

#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "common/base/flag_set.h"

namespace fleet::cli {

int RunLogs(const std::vector<std::string>& args, const CommandContext& ctx) {
  bool follow = false;
  int64_t attempt = 0;
  int64_t tail = 0;
  FlagSet flags("fleetctl logs SERVER [-f] [--attempt N] [--tail N]",
                "A server's log, by attempt (default: the latest), as raw bytes. -f follows it as\n"
                "it grows.");
  flags.AddBool("follow", 'f', &follow, "keep following the log");
  flags.AddInt("attempt", '\0', &attempt, "the attempt number (default: latest)");
  flags.AddInt("tail", '\0', &tail, "only the last N lines (default: all)");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("logs", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (flags.positional().size() != 1) {
    *ctx.err << "fleetctl logs: give exactly one SERVER (see --help)\n";
    return kExitError;
  }
  if (attempt < 0 || tail < 0) {
    *ctx.err << "fleetctl logs: --attempt and --tail take a number >= 0\n";
    return kExitError;
  }
  if (!CheckServerNames("logs", flags.positional(), *ctx.err)) return kExitError;

  v1::ServerLogsRequest request;
  request.set_server(flags.positional()[0]);
  request.set_attempt_number(attempt);
  request.set_follow(follow);
  request.set_tail_lines(tail);
  FleetClient client(ctx, ctx.timeout);
  std::ostream& out = *ctx.out;
  const absl::Status status = client.Logs(request, [&out, follow](const v1::LogChunk& chunk) {
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    // Following is watching: each chunk is shown as it comes.
    if (follow) out.flush();
    return static_cast<bool>(out);
  });
  out.flush();
  if (!status.ok()) return ReportError("logs", status, *ctx.err);
  return kExitOk;
}

}  // namespace fleet::cli

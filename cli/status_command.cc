#include "cli/status_command.h"

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cli/applying_plans_poller.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "cli/server_table.h"
#include "cli/status_format.h"
#include "cli/text_table.h"
#include "common/base/flag_set.h"
#include "common/base/string_view.h"
#include "google/protobuf/arena.h"

namespace fleet::cli {
namespace {

enum class Output { kTable, kWide, kJson, kName };

struct StatusOptions {
  Output output = Output::kTable;
  bool watch = false;
  bool until_ready = false;
};

// Characters a terminal shows for `line` (its SGR escapes take no room).
size_t VisibleWidth(std::string_view line) {
  size_t width = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      i += 2;
      while (i < line.size() && !(line[i] >= '@' && line[i] <= '~')) ++i;
      continue;
    }
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) ++width;
  }
  return width;
}

// The width the human table is fitted to: the terminal's, on one; 0 (whole texts) off a terminal
// and for -o wide.
size_t FitWidth(const CommandContext& ctx, bool wide) {
  if (!ctx.stdout_is_tty || wide) return 0;
  return static_cast<size_t>(std::max(0, ctx.TerminalWidth()));
}

// Prints what a Watch delivers in the chosen form and decides when --until-ready is done. The
// stream's thread calls OnMessage; on a terminal a ticker thread also calls Redraw so ELAPSED
// moves between changes: both hold mu_ while they touch the table or the output.
class WatchPrinter {
 public:
  // `poller` (may be null) knows the plans that REMEDIATING rows wait on; it outlives this.
  WatchPrinter(const CommandContext& ctx, const StatusOptions& options, ApplyingPlansPoller* poller)
      : ctx_(ctx), options_(options), poller_(poller) {}

  // False when --until-ready has its answer (the stream is then cancelled).
  bool OnMessage(const v1::FleetStatusResponse& message) {
    absl::MutexLock lock(&mu_);
    const bool first = !seen_first_;
    seen_first_ = true;
    ServerTable::Update update = table_.Apply(message);
    if (options_.watch) Print(first, update);
    readiness_ = options_.until_ready ? table_.Evaluate() : ServerTable::Readiness::kWaiting;
    return readiness_ == ServerTable::Readiness::kWaiting;
  }

  void Redraw() {
    absl::MutexLock lock(&mu_);
    if (seen_first_) DrawFrame();
  }

  // After the stream: the exit status and the closing words.
  int Finish(const absl::Status& stream_status) {
    absl::MutexLock lock(&mu_);
    std::ostream& out = *ctx_.out;
    std::ostream& err = *ctx_.err;
    if (!stream_status.ok()) return ReportError("status", stream_status, err);
    if (readiness_ == ServerTable::Readiness::kWaiting) {
      err << "fleetctl status: fleetd ended the watch"
          << (options_.until_ready ? " before the servers were ready" : "") << "\n";
      return kExitError;
    }
    if (!options_.watch) PrintFinal();
    const std::vector<const v1::ServerRow*> rows = table_.rows();
    switch (readiness_) {
      case ServerTable::Readiness::kReady:
        if (ctx_.stdout_is_tty && options_.output != Output::kJson &&
            options_.output != Output::kName) {
          out << "all " << rows.size() << (rows.size() == 1 ? " server" : " servers") << " ready\n";
        }
        out.flush();
        return kExitOk;
      case ServerTable::Readiness::kGaveUp:
        for (const v1::ServerRow* row : table_.GaveUp()) {
          err << "fleetctl status: " << row->server() << " gave up"
              << (row->reason().empty() ? "" : ": ") << row->reason() << "\n";
        }
        return kExitNotReady;
      case ServerTable::Readiness::kAllStopped:
        err << "fleetctl status: every server is stopped: none will become ready\n";
        return kExitNotReady;
      case ServerTable::Readiness::kWaiting:
        break;
    }
    return kExitError;
  }

 private:
  absl::Time LineTime() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return table_.at().value_or(ctx_.clock->Now());
  }

  void Print(bool first, const ServerTable::Update& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::ostream& out = *ctx_.out;
    if (options_.output == Output::kJson) {
      if (first) {
        out << StatusJson(table_.at(), table_.rows(), update.removed) << "\n";
      } else if (!update.changed.empty() || !update.removed.empty()) {
        out << StatusJson(table_.at(), update.changed, update.removed) << "\n";
      }
    } else if (ctx_.stdout_is_tty) {
      if (first || !update.changed.empty() || !update.removed.empty()) DrawFrame();
    } else {
      // One line per change: a row whose line (less the time) is what was printed last for it
      // is not a change a reader could see.
      for (const std::string& name : update.removed) {
        out << FormatRemovedLine(LineTime(), name) << "\n";
        last_line_.erase(name);
      }
      for (const v1::ServerRow* row : update.changed) {
        std::string line = FormatChangeLine(LineTime(), *row);
        std::string key = line.substr(line.find(' ') + 1);
        auto [it, inserted] = last_line_.try_emplace(row->server(), key);
        if (!inserted && it->second == key) continue;
        it->second = key;
        out << line << "\n";
      }
    }
    out.flush();
  }

  // The live view: a header line and the table, fitted to the terminal's width as it is now,
  // drawn over the previous frame.
  void DrawFrame() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::vector<const v1::ServerRow*> rows = table_.rows();
    const absl::Time now = ctx_.clock->Now();
    const size_t width = static_cast<size_t>(std::max(0, ctx_.TerminalWidth()));
    const bool wide = options_.output == Output::kWide;
    std::string frame = absl::StrCat(FormatStateCounts(rows), "   ",
                                     absl::FormatTime("%H:%M:%S", now, ctx_.time_zone));
    if (width > 0 && DisplayWidth(frame) > width) frame = ElideMiddle(frame, width);
    frame += "\n";
    ApplyingPlans plans;
    if (poller_ != nullptr) {
      std::set<std::string> containers;
      for (const v1::ServerRow* row : rows) {
        if (WaitsOnRemediation(*row)) containers.insert(ContainerOfServer(row->server()));
      }
      poller_->Want(std::move(containers));
      plans = poller_->Snapshot();
    }
    frame += FormatStatusTable(rows, wide ? TableStyle::kWide : TableStyle::kNormal, now,
                               ctx_.color(), wide ? 0 : width, &plans);
    // Back to the first line of the previous frame, then clear to the end of the screen. A line
    // wider than the terminal (-o wide, or a window made narrower since) took several rows.
    int up = 0;
    for (size_t w : frame_line_widths_) up += width == 0 || w == 0 ? 1 : (w + width - 1) / width;
    std::string erase;
    if (up > 0) erase = absl::StrCat("\r\x1b[", up, "A\x1b[J");
    frame_line_widths_.clear();
    for (absl::string_view line : absl::StrSplit(frame, '\n', absl::SkipEmpty())) {
      frame_line_widths_.push_back(VisibleWidth(AsStd(line)));
    }
    *ctx_.out << erase << frame;
    ctx_.out->flush();
  }

  // --until-ready without --watch prints only the table it ended with.
  void PrintFinal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::ostream& out = *ctx_.out;
    const std::vector<const v1::ServerRow*> rows = table_.rows();
    switch (options_.output) {
      case Output::kJson:
        WriteStatusJson(table_.at(), rows, {}, out);
        out << "\n";
        break;
      case Output::kName:
        for (const v1::ServerRow* row : rows) out << row->server() << "\n";
        break;
      case Output::kTable:
      case Output::kWide:
        out << FormatStatusTable(
            rows, options_.output == Output::kWide ? TableStyle::kWide : TableStyle::kNormal,
            ctx_.clock->Now(), ctx_.color(), FitWidth(ctx_, options_.output == Output::kWide));
        break;
    }
  }

  const CommandContext& ctx_;
  const StatusOptions options_;
  ApplyingPlansPoller* const poller_;
  absl::Mutex mu_;
  ServerTable table_ ABSL_GUARDED_BY(mu_);
  bool seen_first_ ABSL_GUARDED_BY(mu_) = false;
  ServerTable::Readiness readiness_ ABSL_GUARDED_BY(mu_) = ServerTable::Readiness::kWaiting;
  std::map<std::string, std::string> last_line_ ABSL_GUARDED_BY(mu_);
  // The visible width of each line of the frame on the screen.
  std::vector<size_t> frame_line_widths_ ABSL_GUARDED_BY(mu_);
};

int PrintOnce(const v1::FleetStatusResponse& response, const StatusOptions& options,
              const CommandContext& ctx) {
  // The rows as fleetd sent them (one per server, in name order): nothing to merge, so no copy.
  std::vector<const v1::ServerRow*> rows;
  rows.reserve(static_cast<size_t>(response.servers_size()));
  for (const v1::ServerRow& row : response.servers()) rows.push_back(&row);
  std::ostream& out = *ctx.out;
  switch (options.output) {
    case Output::kJson:
      WriteStatusJson(FromProtoTime(response.at()), rows, {}, out);
      out << "\n";
      break;
    case Output::kName:
      for (const v1::ServerRow* row : rows) out << row->server() << "\n";
      break;
    case Output::kTable:
    case Output::kWide:
      if (rows.empty()) {
        *ctx.err << "fleetctl status: no servers (send a fleet config with fleetctl deploy -f "
                    "FILE)\n";
        break;
      }
      out << FormatStatusTable(
          rows, options.output == Output::kWide ? TableStyle::kWide : TableStyle::kNormal,
          ctx.clock->Now(), ctx.color(), FitWidth(ctx, options.output == Output::kWide));
      break;
  }
  out.flush();
  return kExitOk;
}

}  // namespace

int RunStatus(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string output = "table";
  StatusOptions options;
  FlagSet flags(
      "fleetctl status [SERVER...] [-o table|wide|json|name] [--watch] [--until-ready]",
      "Shows each server's state, start phase, JIT progress (ninja [n/m]), time since the\n"
      "attempt started, attempt number and last diagnosis, as fleetd sees them.\n"
      "--watch follows changes: on a terminal a table redrawn in place, else one line per\n"
      "change (with -o json one object per line). --until-ready waits until every server is\n"
      "READY (exit 0) or one GAVE_UP (exit 2; also when all are STOPPED); without --watch it\n"
      "prints only the final table. Colour only on a terminal, never with NO_COLOR set.");
  flags.AddString("output", 'o', &output,
                  "table (fitted to the terminal's width: long names lose their middle), wide "
                  "(every text whole; adds PORT, SINCE, SUMMARY, REASON), json, or name (one "
                  "server name per line)",
                  "FORMAT");
  flags.AddBool("watch", 'w', &options.watch, "follow changes");
  flags.AddBool("until-ready", '\0', &options.until_ready,
                "exit 0 when all are READY, 2 when one GAVE_UP");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("status", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (output == "table") {
    options.output = Output::kTable;
  } else if (output == "wide") {
    options.output = Output::kWide;
  } else if (output == "json") {
    options.output = Output::kJson;
  } else if (output == "name") {
    options.output = Output::kName;
  } else {
    *ctx.err << "fleetctl status: flag -o/--output: '" << output
             << "' is not one of table, wide, json, name\n";
    return kExitError;
  }
  if (options.output == Output::kName && options.watch) {
    *ctx.err << "fleetctl status: -o name does not go with --watch\n";
    return kExitError;
  }
  if (!CheckServerNames("status", flags.positional(), *ctx.err)) return kExitError;

  FleetClient client(ctx, ctx.timeout);
  v1::FleetStatusRequest request;
  for (const std::string& name : flags.positional()) request.add_servers(name);

  if (!options.watch && !options.until_ready) {
    google::protobuf::Arena arena;
    auto* response = google::protobuf::Arena::CreateMessage<v1::FleetStatusResponse>(&arena);
    if (absl::Status s = client.Status(request, response); !s.ok()) {
      return ReportError("status", s, *ctx.err);
    }
    return PrintOnce(*response, options, ctx);
  }

  const bool live = options.watch && ctx.stdout_is_tty && options.output != Output::kJson &&
                    ctx.redraw_interval > absl::ZeroDuration();
  // The plans REMEDIATING rows wait on, for the live table: asked on a client of their own with
  // a short deadline, so a slow answer only delays the remediation line.
  std::unique_ptr<FleetClient> plans_client;
  std::unique_ptr<ApplyingPlansPoller> poller;
  if (live && ctx.remediation_poll_interval > absl::ZeroDuration()) {
    plans_client = std::make_unique<FleetClient>(ctx, std::min(ctx.timeout, absl::Seconds(3)));
    poller = std::make_unique<ApplyingPlansPoller>(
        [client = plans_client.get()](const std::string& container) {
          v1::ListRemediationsRequest list;
          list.set_container(container);
          return client->ListRemediations(list);
        },
        ctx.clock, ctx.remediation_poll_interval);
    poller->Start();
  }
  WatchPrinter printer(ctx, options, poller.get());
  absl::Notification stop_ticker;
  std::thread ticker;
  if (live) {
    ticker = std::thread([&] {
      while (!stop_ticker.WaitForNotificationWithTimeout(ctx.redraw_interval)) printer.Redraw();
    });
  }
  const absl::Status status = client.Watch(
      request, [&printer](const v1::FleetStatusResponse& m) { return printer.OnMessage(m); });
  if (live) {
    stop_ticker.Notify();
    ticker.join();
  }
  return printer.Finish(status);
}

}  // namespace fleet::cli

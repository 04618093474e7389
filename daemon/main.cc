// fleetd: the gpu-fleet control plane. Takes its lock, opens its record, loads the config it was
// given (or the one it stored), serves fleet.proto on a unix socket (0600, or 0660 with
// --socket-group; each peer checked) and, with --listen, on TCP with mutual TLS (the client's
// certificate required and checked against --listen-ca), and reconciles until SIGTERM/SIGINT.
// One shutdown path: the servers keep running (they belong to the agents).
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/flag_set.h"
#include "common/base/private_dir.h"
#include "common/base/unique_fd.h"
#include "common/base/version.h"
#include "common/config/config_duration.h"
#include "common/config/fleet_config.h"
#include "common/log/log.h"
#include "common/net/peer_checked_listener.h"
#include "common/net/tls_files.h"
#include "common/sql/postgres_connection.h"
#include "common/sql/sqlite_connection.h"
#include "daemon/agent_client.h"
#include "daemon/bounded_stop.h"
#include "daemon/daemon.h"
#include "daemon/fleet_service.h"
#include "daemon/leader/elector.h"
#include "daemon/metrics/fleet_metrics.h"
#include "daemon/notify/notifier.h"
#include "daemon/remote/agent_bootstrap.h"
#include "daemon/remote/remote_agent_client.h"
#include "daemon/ssh/ssh_reach.h"
#include "daemon/store/migrate_store.h"
#include "daemon/store/store_url_file.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/server_posix.h"

namespace {

spdlog::logger& Log() { return fleet::log::Get(fleet::log::Component::kDaemon); }

// What containers on SSH hosts need from fleetd itself.
struct RemoteContext {
  std::string state_dir;  // known_hosts default
  absl::StatusOr<fleet::daemon::AgentPackage> package = absl::UnknownError("not looked for");
};

// The client of a container's agent, from its host's reach and its channel. A container on an
// SSH host gets a RemoteAgentClient: it installs or upgrades fleetd's agent there and starts it
// (over SSH and `pct`), then talks to it directly or through an SSH tunnel, with mutual TLS. A
// local container's agent is dialled on its channel; with ca_file, cert_file and key_file
// (required off loopback by the config's validation) the channel is mutual TLS. A client that
// cannot work (a TLS file unreadable, no agent binary to install) fails every call with the
// reason, which the daemon shows as the container's link error.
std::unique_ptr<fleet::daemon::AgentClient> MakeClient(const RemoteContext& remote,
                                                       const std::string& container,
                                                       const fleet::v1::Host& host,
                                                       const fleet::v1::Container& config) {
  const fleet::v1::Channel& ch = config.channel();
  if (host.reach().kind() == fleet::v1::Reach::SSH) {
    if (!remote.package.ok()) {
      fleet::log::Get(fleet::log::Component::kLinks)
          .error("{} {}", fleet::log::LogFields{.container = container},
                 remote.package.status().message());
      return std::make_unique<fleet::daemon::UnavailableAgentClient>(container,
                                                                     remote.package.status());
    }
    fleet::daemon::RemoteAgentOptions options;
    options.container = container;
    options.ctid = config.ctid();
    options.ssh = fleet::daemon::SshOptionsForHost(host, remote.state_dir);
    options.channel = ch;
    options.package = *remote.package;
    return std::make_unique<fleet::daemon::RemoteAgentClient>(std::move(options));
  }
  std::string target;
  if (absl::StartsWith(ch.address(), "unix:")) {
    target = ch.address();
  } else {
    std::string address = ch.address().empty() ? "127.0.0.1" : ch.address();
    // An IPv6 literal needs its brackets before the port.
    if (absl::StrContains(address, ':') && !absl::StartsWith(address, "[")) {
      address = absl::StrCat("[", address, "]");
    }
    target = absl::StrCat(address, ":", ch.port() > 0 ? ch.port() : 50151);
  }
  if (ch.ca_file().empty() && ch.cert_file().empty() && ch.key_file().empty()) {
    return std::make_unique<fleet::daemon::GrpcAgentClient>(container, target);
  }
  // The agent's certificate must name this container (AgentTlsName), whatever address is dialled.
  absl::StatusOr<fleet::daemon::AgentTls> tls = fleet::daemon::ReadChannelTls(container, ch);
  if (!tls.ok()) {
    fleet::log::Get(fleet::log::Component::kLinks)
        .error("{} {}", fleet::log::LogFields{.container = container}, tls.status().message());
    return std::make_unique<fleet::daemon::UnavailableAgentClient>(container, tls.status());
  }
  return std::make_unique<fleet::daemon::GrpcAgentClient>(container, target, *tls);
}

// --listen's address with the port the kernel chose: "127.0.0.1:0" and 7443 give "127.0.0.1:7443"
// (an IPv6 literal keeps its brackets).
std::string ChosenAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

// STATE_DIR/listen.addr: the address fleetd serves fleet.proto on, for whoever asked for port 0 (a
// test, a script). Written whole or not at all (a reader never sees half a line), owner-only.
absl::Status WriteListenAddress(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  fleet::UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  const std::string line = address + "\n";
  if (!fd.valid() || fchmod(fd.get(), 0600) != 0 ||
      write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
      fsync(fd.get()) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot be written: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

// Where standbys send clients while this fleetd leads: --advertise, else the --listen address as
// chosen, its wildcard host (0.0.0.0, [::], none) replaced by this machine's name; "" without
// --listen (standbys then say the leader has no address).
std::string AdvertisedAddress(const std::string& advertise, const std::string& listen_address) {
  if (!advertise.empty() || listen_address.empty()) return advertise;
  const size_t colon = listen_address.rfind(':');
  const std::string host = listen_address.substr(0, colon);
  if (host != "0.0.0.0" && host != "[::]" && host != "::" && !host.empty()) return listen_address;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return listen_address;
  return absl::StrCat(name, listen_address.substr(colon));
}

// A fleetd that lost its lease exits with this (EX_TEMPFAIL): its supervisor starts it again, as a
// standby.
constexpr int kLostLeaseExit = 75;

// This fleetd among those sharing the record: host, pid and a random part (a pid is reused).
std::string HolderName() {
  static const std::string name = [] {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    unsigned char bytes[4] = {};
    if (getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
      // Without randomness the pid and the time tell fleetds apart well enough.
      const auto t = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
      for (int i = 0; i < 4; ++i) bytes[i] = static_cast<unsigned char>(t >> (8 * i));
    }
    return absl::StrFormat("%s/%d/%02x%02x%02x%02x", host, getpid(), bytes[0], bytes[1], bytes[2],
                           bytes[3]);
  }();
  return name;
}

// A fleetd sharing its record (--store-file): whether it leads, and who does when it does not.
struct Leadership {
  std::string fleet_id;
  std::shared_ptr<fleet::daemon::LeaderFence> fence;
  std::unique_ptr<fleet::daemon::LeaderElector> owned;
  std::atomic<fleet::daemon::LeaderElector*> elector{nullptr};
  std::atomic<int64_t> pending_term{0};  // set by the elector's on_lead, taken by main
  std::atomic<bool> stopping{false};
  bool leading = false;  // main thread only

  // Whether this fleetd may act now: it took over and its lease is held, before its deadline.
  bool HoldsNow() const {
    fleet::daemon::LeaderElector* e = elector.load();
    return e != nullptr && fence->term() > 0 && e->HoldsNow(absl::Now());
  }
  fleet::daemon::LeaderView View() const {
    fleet::daemon::LeaderView v;
    v.self = HoldsNow();
    if (v.self) {
      v.term = fence->term();
      return v;
    }
    fleet::daemon::LeaderElector* e = elector.load();
    if (e == nullptr) return v;
    const fleet::daemon::LeaseView seen = e->seen();
    // Itself while taking over (or stepping down): nobody leads for the client yet.
    if (seen.term > 0 && seen.holder != HolderName()) {
      v.holder = seen.holder;
      v.address = seen.address;
    }
    return v;
  }
};

// --socket-group: a group name or number.
bool ParseGroup(const std::string& text, gid_t* gid) {
  uint32_t id = 0;
  if (absl::SimpleAtoi(text, &id) && id != static_cast<uint32_t>(-1)) {
    *gid = id;
    return true;
  }
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  if (getgrnam_r(text.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return false;
  }
  *gid = found->gr_gid;
  return true;
}

// `fleetd migrate-store`: copies a SQLite record (fleet.db, which a fleetd may be writing to) into
// an empty PostgreSQL database (migrate_store.h), prints each table's rows in both, and exits 0
// only when everything was copied and the counts match. The URL comes from --to when it carries
// no password, else from --to-file (read as --store-file is): a password is never in argv.
int MigrateStoreCommand(const std::vector<std::string>& args) {
  std::string from;
  std::string to;
  std::string to_file;
  std::string log_level = "info";
  fleet::FlagSet flags(
      "fleetd migrate-store --from sqlite:PATH (--to-file FILE | --to URL) [flags]",
      "Copies a fleet record from SQLite (fleet.db; fleetd may be running on it: the copy is one\n"
      "consistent snapshot, and the file is only read) into an empty PostgreSQL database, in one\n"
      "transaction, then compares every table's rows in the two. The database must exist; its\n"
      "tables are made as fleetd --store-file makes them. A database whose tables hold rows is\n"
      "refused. Then run fleetd with --store-file FILE. Exit 0 when copied and the counts match.");
  flags.AddString("from", '\0', &from,
                  "the record to copy: sqlite:PATH (e.g. "
                  "sqlite:/var/lib/gpu-fleet/fleet.db)",
                  "sqlite:PATH");
  flags.AddString("to-file", '\0', &to_file,
                  "FILE (mode 0600 or stricter, as for fleetd --store-file) holds the target's "
                  "postgres:// URL, password included",
                  "FILE");
  flags.AddString("to", '\0', &to,
                  "the target's postgres:// URL, only without a password (argv is seen by every "
                  "user: a password goes in --to-file's file, or libpq's ~/.pgpass)",
                  "URL");
  flags.AddString("log-level", '\0', &log_level,
                  "the least level logged: trace, debug, info, warn, error or off", "LEVEL");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "fleetd migrate-store: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (!flags.positional().empty()) {
    std::cerr << "fleetd migrate-store: unexpected argument '" << flags.positional()[0] << "'\n";
    return 1;
  }
  if (!absl::StartsWith(from, "sqlite:") || from.size() == std::strlen("sqlite:")) {
    std::cerr << "fleetd migrate-store: give --from sqlite:PATH (the fleet.db to copy)\n";
    return 1;
  }
  if (to.empty() == to_file.empty()) {
    std::cerr << "fleetd migrate-store: give one of --to-file FILE and --to URL\n";
    return 1;
  }
  if (!to.empty()) {
    // Said without quoting the URL: its password would be shown once more.
    if (absl::Status s = fleet::daemon::CheckUrlWithoutPassword(to); !s.ok()) {
      std::cerr << "fleetd migrate-store: " << s.message() << "\n";
      return 1;
    }
  }
  absl::StatusOr<spdlog::level::level_enum> level = fleet::log::ParseLevel(log_level);
  if (!level.ok()) {
    std::cerr << "fleetd migrate-store: --log-level: " << level.status().message() << "\n";
    return 1;
  }
  fleet::log::LogOptions log_options;
  log_options.level = *level;
  if (absl::Status s = fleet::log::InitLogging(log_options); !s.ok()) {
    std::cerr << "fleetd migrate-store: " << s.message() << "\n";
    return 1;
  }
  spdlog::logger& log = fleet::log::Get(fleet::log::Component::kStore);
  std::string url = to;
  if (!to_file.empty()) {
    absl::StatusOr<std::string> read = fleet::daemon::ReadStoreUrlFile(to_file);
    if (!read.ok()) {
      log.error("{}", read.status().message());
      return 1;
    }
    url = *std::move(read);
  }

  // The source as it is: never created (a wrong path is not an empty record), its mode kept.
  const std::string path = from.substr(std::strlen("sqlite:"));
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) {
    log.error("source {}: {}", path, std::strerror(errno));
    return 1;
  }
  if (!S_ISREG(st.st_mode)) {
    log.error("source {}: not a regular file", path);
    return 1;
  }
  fleet::sqlite::OpenOptions open;
  open.mode = static_cast<int>(st.st_mode & 07777);
  auto source = fleet::sql::SqliteConnection::Open(path, open);
  if (!source.ok()) {
    log.error("{}", source.status().message());
    return 1;
  }
  auto target = fleet::sql::PostgresConnection::Connect(url);
  if (!target.ok()) {
    log.error("{}", target.status().message());
    return 1;
  }
  log.info("copying {} into {}", path, (*target)->name());
  fleet::daemon::MigrateOptions options;
  options.progress = [&log](const fleet::daemon::MigrateProgress& p) {
    if (p.done) {
      log.info("{}: {} rows copied", p.table, p.rows);
    } else {
      log.info("{}: {} rows so far", p.table, p.rows);
    }
  };
  absl::StatusOr<fleet::daemon::MigrateResult> result =
      fleet::daemon::MigrateStore(**source, **target, options);
  if (!result.ok()) {
    log.error("{}", result.status().message());
    return 1;
  }
  std::cout << std::left << std::setw(22) << "table" << std::right << std::setw(12) << "source"
            << std::setw(12) << "target"
            << "\n";
  for (const fleet::daemon::TableCount& t : result->tables) {
    std::cout << std::left << std::setw(22) << t.table << std::right << std::setw(12) << t.source
              << std::setw(12) << t.target << "\n";
  }
  std::cout << "copied " << result->tables.size() << " tables (schema version "
            << result->schema_version << ") into " << (*target)->name()
            << "; the counts match. Next: fleetd --store-file FILE\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "migrate-store") {
    return MigrateStoreCommand(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  bool version = false;
  std::string config_path;
  std::string state_dir = "/var/lib/gpu-fleet";
  std::string socket_path;
  std::string socket_group;
  std::string event_retention = "30d";
  int64_t max_events = 2000000;
  std::string agent_binary;
  std::string stop_timeout_text = absl::FormatDuration(fleet::daemon::kDefaultStopTimeout);
  std::string db_synchronous = "full";
  std::string clock_offset_file;
  std::string db_vfs;
  std::string store_file;
  std::string log_level = "info";
  std::string metrics_listen;
  std::string metrics_cert, metrics_key, metrics_ca;
  bool insecure_listen = false;
  std::string lease_text = "3s";
  std::string advertise;
  std::string listen;
  fleet::net::TlsFiles listen_tls;
  fleet::FlagSet flags(
      "fleetd [flags]",
      "The gpu-fleet daemon: holds the fleet config as desired state (in STATE_DIR/fleet.db),\n"
      "follows every container's agent, records every start attempt, diagnosis and remediation,\n"
      "and reconciles: launch, restart with backoff, give up with the reason, stop. fleetctl\n"
      "talks to it over STATE_DIR/fleetd.sock, and over --listen with mutual TLS. It runs in the\n"
      "foreground (systemd: deploy/fleetd.service); stopping it leaves the servers running.\n"
      "`fleetd migrate-store --help`: copying fleet.db into PostgreSQL (for --store-file).");
  flags.AddBool("version", '\0', &version, "print the version and exit");
  flags.AddString("config", '\0', &config_path,
                  "fleet config (YAML): seeds an empty record, and is applied at a start only when "
                  "it changed since it was last applied (the record's desired state wins)",
                  "FILE");
  flags.AddString("state-dir", '\0', &state_dir, "fleet.db, the socket and the lock live here",
                  "DIR");
  flags.AddString("socket", '\0', &socket_path,
                  "unix socket to serve on (default STATE_DIR/fleetd.sock; 0600: root and "
                  "fleetd's own user only, each peer checked)",
                  "PATH");
  flags.AddString("socket-group", '\0', &socket_group,
                  "members of this group may use fleetctl too: the socket is 0660 with this "
                  "group (its directory must let them through). Whoever is in it may run "
                  "anything in every container",
                  "GROUP");
  flags.AddString("event-retention", '\0', &event_retention,
                  "agent events older than this are pruned from fleet.db (attempts and "
                  "remediations are kept); e.g. 30d, 72h",
                  "DURATION");
  flags.AddString("agent-binary", '\0', &agent_binary,
                  "the fleet-agent (with fleet-http-probe next to it) to install in containers on "
                  "ssh hosts (default: next to fleetd, or the build tree's agent/)",
                  "PATH");
  flags.AddString("stop-timeout", '\0', &stop_timeout_text,
                  "the longest fleetd takes to stop: a remediation or agent call still running "
                  "then is abandoned (a remediation cut short is resolved at the next start); "
                  "keep the unit's TimeoutStopSec longer",
                  "DURATION");
  flags.AddInt("max-events", '\0', &max_events,
               "at most this many agent events are kept in fleet.db (the newest)", "N");
  flags.AddString("clock-offset-file", '\0', &clock_offset_file,
                  "testing: the wall clock fleetd sees is the system's plus the signed seconds in "
                  "this file, read again every 100 ms (the fault matrix's clock-jump row)",
                  "FILE");
  flags.AddString("store-file", '\0', &store_file,
                  "keep the record in PostgreSQL instead of STATE_DIR/fleet.db: FILE (mode 0600 "
                  "or stricter) holds its postgres:// URL, password included, so that the URL is "
                  "never in argv; the database must exist (its tables are made). The lock and "
                  "the socket stay in STATE_DIR. Several fleetds may share the record: one leads "
                  "(a lease), the others stand by, answer reads and take over "
                  "(docs/high-availability.md)",
                  "FILE");
  flags.AddString("lease", '\0', &lease_text,
                  "with --store-file: how long the leader's lease lasts without a renewal (it "
                  "renews every second; a standby takes over once it expired, by the database's "
                  "clock). Every fleetd of a fleet should say the same",
                  "DURATION");
  flags.AddString("advertise", '\0', &advertise,
                  "with --store-file: the HOST:PORT standbys send fleetctl to while this fleetd "
                  "leads (its --listen as clients reach it; its certificate must name HOST). "
                  "Default: the --listen address, with this machine's host name for a wildcard "
                  "(0.0.0.0, [::])",
                  "ADDR");
  flags.AddString("db-synchronous", '\0', &db_synchronous,
                  "how fleet.db commits: full (each commit synced: survives a power loss; the "
                  "default) or normal (survives a crash of fleetd only; for measuring the cost)",
                  "full|normal");
  flags.AddString("db-vfs", '\0', &db_vfs,
                  "tests only: open fleet.db with this SQLite VFS (fleet-powerloss: the fault "
                  "matrix's power-loss row, whose power cut then loses the unsynced writes); "
                  "default: SQLite's",
                  "NAME");
  flags.AddString("metrics-listen", '\0', &metrics_listen,
                  "serve Prometheus metrics on HOST:PORT (/metrics, /metrics/targets; port 0: any "
                  "free one, logged); off unless given",
                  "ADDR");
  flags.AddString("metrics-cert", '\0', &metrics_cert,
                  "TLS for --metrics-listen: fleetd's certificate (with --metrics-key and "
                  "--metrics-ca; a scraper presents a certificate the CA signed)",
                  "FILE");
  flags.AddString("metrics-key", '\0', &metrics_key, "TLS for --metrics-listen: its key", "FILE");
  flags.AddString("metrics-ca", '\0', &metrics_ca,
                  "TLS for --metrics-listen: the CA of the scrapers' certificates", "FILE");
  flags.AddString("listen", '\0', &listen,
                  "serve fleet.proto (fleetctl --server) on HOST:PORT too, with mutual TLS "
                  "(--listen-cert, --listen-key, --listen-ca); port 0: any free one, written to "
                  "STATE_DIR/listen.addr and logged. The unix socket keeps working",
                  "ADDR");
  flags.AddString("listen-cert", '\0', &listen_tls.cert_file,
                  "TLS for --listen: fleetd's server certificate (fleetctl certs init "
                  "--listen-names)",
                  "FILE");
  flags.AddString("listen-key", '\0', &listen_tls.key_file, "TLS for --listen: its key", "FILE");
  flags.AddString("listen-ca", '\0', &listen_tls.ca_file,
                  "TLS for --listen: the CA a client's certificate must be signed by (every "
                  "client presents one; none, or another CA's, is refused)",
                  "FILE");
  flags.AddBool("insecure-listen", '\0', &insecure_listen,
                "let --metrics-listen serve plaintext off loopback (whoever reaches it reads the "
                "fleet's state), and --listen serve fleet.proto in plaintext without "
                "authentication (whoever reaches it runs anything in every container)");
  flags.AddString("log-level", '\0', &log_level,
                  "the least level logged: trace, debug, info, warn, error or off", "LEVEL");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "fleetd: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (version) {
    std::cout << "fleetd " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  if (!flags.positional().empty()) {
    std::cerr << "fleetd: unexpected argument '" << flags.positional()[0] << "'\n";
    return 1;
  }
  // Log lines on stderr: journald's under deploy/fleetd.service (no timestamps then). What is
  // said before this (a usage error) goes to stderr as "fleetd: ..."; everything after, through
  // the loggers.
  absl::StatusOr<spdlog::level::level_enum> level = fleet::log::ParseLevel(log_level);
  if (!level.ok()) {
    std::cerr << "fleetd: --log-level: " << level.status().message() << "\n";
    return 1;
  }
  fleet::log::LogOptions log_options;
  log_options.level = *level;
  if (absl::Status s = fleet::log::InitLogging(log_options); !s.ok()) {
    std::cerr << "fleetd: " << s.message() << "\n";
    return 1;
  }
  if (socket_path.empty()) socket_path = state_dir + "/fleetd.sock";
  fleet::net::ListenerOptions socket_options;
  socket_options.path = socket_path;
  if (!socket_group.empty()) {
    gid_t gid = 0;
    if (!ParseGroup(socket_group, &gid)) {
      Log().error("flag --socket-group: no group '{}'", socket_group);
      return 1;
    }
    socket_options.group = gid;
    socket_options.policy.gids.push_back(gid);
  }
  fleet::daemon::DaemonOptions options;
  {
    // Days are the habit for retention; the config's durations know up to hours.
    std::string text = event_retention;
    absl::Duration unit = absl::ZeroDuration();
    if (absl::EndsWith(text, "d")) {
      text.pop_back();
      double days = 0;
      if (absl::SimpleAtod(text, &days) && days > 0) unit = absl::Hours(24) * days;
    } else if (auto d = fleet::config::ParseConfigDuration(text);
               d.ok() && *d > absl::ZeroDuration()) {
      unit = *d;
    }
    if (unit <= absl::ZeroDuration()) {
      Log().error("flag --event-retention: '{}' is not a positive duration (30d, 72h, 90m)",
                  event_retention);
      return 1;
    }
    options.event_retention = unit;
    if (max_events < 1) {
      Log().error("flag --max-events: must be at least 1");
      return 1;
    }
    options.max_events = max_events;
  }

  absl::Duration stop_timeout;
  if (auto d = fleet::config::ParseConfigDuration(stop_timeout_text);
      d.ok() && *d > absl::ZeroDuration()) {
    stop_timeout = *d;
  } else {
    Log().error("flag --stop-timeout: '{}' is not a positive duration (30s, 2m)",
                stop_timeout_text);
    return 1;
  }

  absl::Duration lease_duration;
  if (auto d = fleet::config::ParseConfigDuration(lease_text); d.ok() && *d >= absl::Seconds(1)) {
    lease_duration = *d;
  } else {
    Log().error("flag --lease: '{}' is not a duration of at least 1s (3s, 10s)", lease_text);
    return 1;
  }
  const absl::Duration lease_margin = std::min(absl::Milliseconds(500), lease_duration / 4);
  if (!store_file.empty()) {
    // Every write transaction holds the lease row's KEY SHARE lock until it ends, and a takeover
    // waits for it: a leader paused (SIGSTOP) or cut off inside one would hold the fleet's
    // takeover for as long as its session lives (a paused machine's kernel keeps the connection
    // up). The server ends a session idle in a transaction for the lease's local span, so the
    // lock goes with it. Set for every session of this process (libpq reads PGOPTIONS at each
    // connect, the reconnects too), before any thread starts.
    std::string pg_options;
    if (const char* given = std::getenv("PGOPTIONS"); given != nullptr) {
      pg_options = absl::StrCat(given, " ");
    }
    absl::StrAppend(&pg_options, "-c idle_in_transaction_session_timeout=",
                    absl::ToInt64Milliseconds(lease_duration - lease_margin));
    setenv("PGOPTIONS", pg_options.c_str(), 1);
  }

  if (!advertise.empty()) {
    const size_t colon = advertise.rfind(':');
    if (store_file.empty() || listen.empty() || colon == std::string::npos || colon == 0 ||
        colon + 1 == advertise.size() ||
        advertise.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
        advertise.find_first_of(" \t\n,") != std::string::npos) {
      Log().error(
          "flag --advertise '{}': give HOST:PORT, with --store-file and --listen (where standbys "
          "send fleetctl while this fleetd leads)",
          advertise);
      return 1;
    }
  }

  // fleet.proto over TCP: mutual TLS, or plaintext only when asked for by name. Even on loopback:
  // every local user reaches a TCP port, and fleet.proto runs anything in every container (the
  // unix socket checks its peers; TCP has only the certificate to go by).
  std::shared_ptr<grpc::ServerCredentials> listen_credentials;
  if (!listen.empty()) {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size() ||
        listen.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
        absl::StartsWith(listen, "unix:")) {
      Log().error("flag --listen '{}': give HOST:PORT (port 0: any free one)", listen);
      return 1;
    }
    if (listen_tls.given() == 0 && !insecure_listen) {
      Log().error(
          "refusing to serve fleet.proto on {} without TLS: whoever reaches a TCP port (every "
          "local user, even on loopback) could run anything in every container. Give "
          "--listen-cert, --listen-key and --listen-ca (fleetctl certs init --listen-names, "
          "--clients), or pass --insecure-listen",
          listen);
      return 1;
    }
    if (listen_tls.given() == 0) {
      listen_credentials = grpc::InsecureServerCredentials();
    } else {
      absl::StatusOr<fleet::net::TlsPem> pem = fleet::net::ReadTlsFiles(listen_tls, "--listen-");
      if (!pem.ok()) {
        Log().error("{}", pem.status().message());
        return 1;
      }
      grpc::SslServerCredentialsOptions ssl(
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      ssl.pem_root_certs = pem->ca_pem;
      ssl.pem_key_cert_pairs.push_back({pem->key_pem, pem->cert_pem});
      listen_credentials = grpc::SslServerCredentials(ssl);
    }
  } else if (listen_tls.given() != 0) {
    Log().error("--listen-cert, --listen-key and --listen-ca are for --listen");
    return 1;
  }

  // A bad config is reported before anything else happens.
  std::optional<fleet::v1::FleetConfig> config;
  std::string yaml;
  if (!config_path.empty()) {
    auto c = fleet::config::LoadFleetConfig(config_path);
    if (!c.ok()) {
      Log().error("{}", c.status().message());
      return 1;
    }
    config = *std::move(c);
    std::ifstream in(config_path);
    std::ostringstream text;
    text << in.rdbuf();
    yaml = text.str();
  }

  if (db_synchronous != "full" && db_synchronous != "normal") {
    Log().error("--db-synchronous: full or normal, got '{}'", db_synchronous);
    return 1;
  }
  // Where the record is: fleet.db in the state dir, or the PostgreSQL database --store-file names.
  std::string store_target = state_dir + "/fleet.db";
  if (!store_file.empty()) {
    if (!db_vfs.empty() || db_synchronous != "full") {
      Log().error("--db-vfs and --db-synchronous are SQLite's: not with --store-file");
      return 1;
    }
    absl::StatusOr<std::string> url = fleet::daemon::ReadStoreUrlFile(store_file);
    if (!url.ok()) {
      Log().error("{}", url.status().message());
      return 1;
    }
    store_target = *std::move(url);
  }
  // Owner-only: fleet.db holds the config's env values (docs/config.md, "Secrets").
  absl::StatusOr<int> old_mode = fleet::MakePrivateDir(state_dir);
  if (!old_mode.ok()) {
    Log().error("{}", old_mode.status().message());
    return 1;
  }
  if (*old_mode >= 0) {
    Log().warn("state dir {}: mode {:04o} narrowed to 0700 (it holds fleet.db)", state_dir,
               *old_mode);
  }
  // The lock first: one daemon per state dir.
  fleet::UniqueFd lock(
      open((state_dir + "/fleetd.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid() || flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    Log().error("another fleetd runs on {} ({}/fleetd.lock is held)", state_dir, state_dir);
    return 1;
  }
  // A listen.addr of a previous run names a port nobody serves now: gone before anyone reads it.
  unlink((state_dir + "/listen.addr").c_str());
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(lock.get(), 0) == 0 && write(lock.get(), pid.data(), pid.size()) < 0) {
    // The pid in the lock file is a courtesy; the lock is what counts.
  }

  // The signals main waits for are blocked before any thread starts (gRPC's start with
  // grpc_init): a thread that left one unblocked would take it and die of it (SIGUSR1's default
  // action), or end fleetd without its clean stop (SIGTERM). Every thread inherits this mask.
  // Until here a SIGTERM ends fleetd at once: nothing it started yet needs a clean stop.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  // SIGUSR1: the elector (on its thread) tells the main thread that this fleetd now leads.
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const pthread_t main_thread = pthread_self();
  signal(SIGPIPE, SIG_IGN);
  grpc_init();  // ended with grpc_shutdown_blocking() at the end of main
  // Debian's Abseil is built with its mutex deadlock detection on: every lock taken while another
  // is held (gRPC's and ours) goes through one global lock-order graph. Measured at 1,000
  // agents (bench/daemon), that was 4-5% of fleetd's CPU time; the lock order is our code's job.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  fleet::daemon::FleetStoreOptions store_options;
  store_options.synchronous = db_synchronous == "normal"
                                  ? fleet::sqlite::OpenOptions::Synchronous::kNormal
                                  : fleet::sqlite::OpenOptions::Synchronous::kFull;
  store_options.vfs = db_vfs;
  auto store = fleet::daemon::FleetStore::Open(store_target, store_options);
  // Never store_target itself in a log: a URL's password. The store's name is redacted. A shared
  // record keeps it until the elector has opened its own session with it.
  const bool shared = !store_file.empty();
  std::string lease_url = shared ? store_target : "";
  store_target.clear();
  if (!store.ok()) {
    Log().error("{}", store.status().message());
    return 1;
  }
  const std::string record_name = (*store)->db().name();  // a file's path, or a redacted URL
  // Fleetds sharing a record lead by a lease (issue 16): until this one takes it, it stands by.
  Leadership leadership;
  if (shared) {
    absl::StatusOr<std::string> fleet_id = (*store)->FleetId();
    if (!fleet_id.ok()) {
      Log().error("{}", fleet_id.status().message());
      return 1;
    }
    leadership.fleet_id = *fleet_id;
    leadership.fence = std::make_shared<fleet::daemon::LeaderFence>();
    options.fence = leadership.fence;
    options.may_act = [&leadership] { return leadership.HoldsNow(); };
  }
  const fleet::WallClock wall(clock_offset_file);
  // Timers run on the monotonic clock (common/base/clock.h): a step of the wall clock is said.
  fleet::RealClock clock(&wall, [](absl::Duration step) {
    Log().warn(
        "the wall clock stepped by {}: no timer moves; timestamps keep their frame until a "
        "restart",
        absl::FormatDuration(step));
  });
  // Containers on SSH hosts get this build's agent: found once (its version is asked of it).
  RemoteContext remote;
  remote.state_dir = state_dir;
  {
    std::error_code self_ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", self_ec).string();
    remote.package = fleet::daemon::FindAgentPackage(self, agent_binary);
  }
  auto daemon = fleet::daemon::Daemon::Create(
      *std::move(store),
      [&remote](const std::string& container, const fleet::v1::Host& host,
                const fleet::v1::Container& c) { return MakeClient(remote, container, host, c); },
      &clock, options);
  if (!daemon.ok()) {
    Log().error("{}", daemon.status().message());
    return 1;
  }
  // What a leader does before its first turn: a fleetd alone at once, one sharing its record once
  // it takes the lease (a standby writes nothing, sends nothing).
  auto notifier = std::make_unique<fleet::daemon::Notifier>(
      [d = daemon->get()](const fleet::daemon::DeliveryRecord& r) { return d->RecordDelivery(r); });
  const auto start_leading = [&]() -> bool {
    if (config) {
      // The stored desired state wins: the file seeds an empty record, and is applied again only
      // when it changed since it was last applied (a `fleetctl deploy -f` since then stays).
      auto r = (*daemon)->ApplyStartupConfig(config_path, yaml);
      if (!r.ok()) {
        Log().error("{}", r.status().message());
        return false;
      }
      Log().info("{}", r->message);
    }
    // Webhooks: the deliveries the record holds pending (a stop, a crash, the leader before) go
    // first.
    (*daemon)->SetDeliverySink(notifier.get());
    (*daemon)->Start();
    return true;
  };
  if (!shared && !start_leading()) return 1;
  // Metrics: counted from the first event on, served once the rest is up.
  std::unique_ptr<fleet::daemon::FleetMetrics> metrics;
  std::unique_ptr<fleet::daemon::MetricsServer> metrics_server;
  if (!metrics_listen.empty()) {
    metrics = std::make_unique<fleet::daemon::FleetMetrics>(
        daemon->get(), shared ? std::function<fleet::daemon::LeaderView()>(
                                    [&leadership] { return leadership.View(); })
                              : nullptr);
    fleet::daemon::MetricsServerOptions mo;
    mo.listen = metrics_listen;
    mo.insecure = insecure_listen;
    mo.cert_file = metrics_cert;
    mo.key_file = metrics_key;
    mo.ca_file = metrics_ca;
    auto started = fleet::daemon::MetricsServer::Start(metrics.get(), mo);
    if (!started.ok()) {
      Log().error("{}", started.status().message());
      return 1;
    }
    metrics_server = *std::move(started);
    const std::string scheme = metrics_server->tls() ? "https" : "http";
    std::string host = metrics_listen.substr(0, metrics_listen.rfind(':'));
    Log().info("metrics: {}://{}:{}/metrics (targets: /metrics/targets)", scheme, host,
               metrics_server->port());
    if (!metrics_server->tls() && !fleet::daemon::IsLoopbackHost(host)) {
      Log().warn("--insecure-listen: metrics served in plaintext on {}", metrics_listen);
    }
  } else if (insecure_listen && (listen.empty() || listen_tls.given() != 0)) {
    Log().warn("--insecure-listen without --metrics-listen: nothing to serve in plaintext");
  }

  fleet::daemon::FleetService service(daemon->get(), state_dir,
                                      shared ? std::function<fleet::daemon::LeaderView()>(
                                                   [&leadership] { return leadership.View(); })
                                             : nullptr);
  // fleet.proto tells every agent what to run: each connection's peer is checked (SO_PEERCRED)
  // before gRPC sees it. A stale socket of a previous run is replaced (the lock says none runs).
  auto listener = fleet::net::PeerCheckedListener::Create(socket_options);
  if (!listener.ok()) {
    Log().error("cannot serve on {}: {}", socket_path, listener.status().message());
    return 1;
  }
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  // The same service on --listen: gRPC's own TCP listener, whose TLS checks each client.
  int listen_port = 0;
  if (!listen.empty()) builder.AddListeningPort(listen, listen_credentials, &listen_port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!listen.empty() && listen_port == 0)) {
    if (listen.empty()) {
      Log().error("cannot serve on {}", socket_path);
    } else {
      Log().error(
          "cannot serve on {} (the address is in use or not this machine's, or the TLS "
          "certificate and key do not fit together)",
          listen);
    }
    return 1;
  }
  std::string listen_address;
  if (!listen.empty()) {
    listen_address = ChosenAddress(listen, listen_port);
    const std::string addr_file = state_dir + "/listen.addr";
    if (absl::Status s = WriteListenAddress(addr_file, listen_address); !s.ok()) {
      Log().error("{}", s.message());
      return 1;
    }
    if (listen_tls.given() != 0) {
      Log().info(
          "serving fleet.proto on {} with mutual TLS: clients must present a certificate "
          "signed by {} (address in {})",
          listen_address, listen_tls.ca_file, addr_file);
    } else {
      // Said loudly, on every start: this is a door without a lock.
      Log().warn(
          "--insecure-listen: serving fleet.proto on {} in PLAINTEXT WITHOUT AUTHENTICATION: "
          "whoever reaches it can deploy, stop and run anything in every container (address "
          "in {})",
          listen_address, addr_file);
    }
  }
  grpc::Server* const serving = server.get();
  (*listener)->Start(
      [serving](fleet::UniqueFd fd) { grpc::AddInsecureChannelFromFd(serving, fd.Release()); },
      [](const absl::Status& why) { Log().warn("{}", why.message()); });
  Log().info("fleetd {}: serving on {} (only {}){}, record {}", fleet::kVersion, socket_path,
             (*listener)->Describe(),
             listen_address.empty() ? "" : absl::StrCat(" and ", listen_address), record_name);
  if (shared) {
    fleet::daemon::ElectorOptions eo;
    eo.lease.fleet_id = leadership.fleet_id;
    eo.lease.holder = HolderName();
    eo.lease.address = AdvertisedAddress(advertise, listen_address);
    eo.lease.duration = lease_duration;
    eo.lease.margin = lease_margin;
    eo.retry = std::min(absl::Milliseconds(500), lease_duration / 4);
    eo.renew = std::min(absl::Seconds(1), lease_duration / 3);
    eo.on_lead = [&leadership, main_thread](int64_t term) {
      leadership.pending_term.store(term);
      // To the main thread itself (it waits for it): a signal to the process could be taken by
      // any thread that does not block it.
      pthread_kill(main_thread, SIGUSR1);
    };
    eo.on_step_down = [&leadership] {
      if (leadership.stopping.load()) return;
      // Kubernetes' controllers do the same: a process that lost its lease ends, and its
      // supervisor (systemd: Restart=on-failure) starts it again as a standby. Nothing of this
      // one can act by now: its writes are fenced by the term, its agent requests refused.
      Log().critical("lost the lease of fleet {}: exiting (restart me as a standby)",
                     leadership.fleet_id);
      _exit(kLostLeaseExit);
    };
    auto elector = fleet::daemon::LeaderElector::Start(lease_url, std::move(eo));
    lease_url.clear();
    if (!elector.ok()) {
      Log().error("leader lease: {}", elector.status().message());
      return 1;
    }
    leadership.elector = elector->get();
    leadership.owned = *std::move(elector);
    Log().info("fleet {}: standing by as {} until the lease ({}) is free", leadership.fleet_id,
               HolderName(), absl::FormatDuration(lease_duration));
  }

  int sig = 0;
  for (;;) {
    if (!shared) {
      sigwait(&stop_signals, &sig);
      break;
    }
    // A leader also watches its lease's local deadline here: the elector's thread may be blocked
    // in a call to a database it no longer reaches (a partition drops packets; nothing fails
    // until TCP gives up), and this fleetd must stop being the leader anyway.
    const timespec quarter = {0, 250 * 1000 * 1000};
    sig = sigtimedwait(&stop_signals, nullptr, &quarter);
    if (sig < 0) {
      if (leadership.leading && !leadership.HoldsNow()) {
        Log().critical(
            "fleet {}: the lease was not renewed before its local deadline (the database is "
            "unreachable?): exiting (restart me as a standby)",
            leadership.fleet_id);
        _exit(kLostLeaseExit);
      }
      continue;
    }
    if (sig != SIGUSR1) break;
    const int64_t term = leadership.pending_term.exchange(0);
    if (term == 0 || leadership.leading) continue;  // not the elector's
    // The takeover: the record as the old leader left it (its last commit), fenced by the new
    // term before anything is written, then the turns, which follow every agent from its stored
    // cursor and carry on the attempts, backoffs and remediations the record holds.
    const absl::Time began = absl::Now();
    if (absl::Status s = (*daemon)->Reload(); !s.ok()) {
      Log().critical("taking over fleet {}: reading the record: {}: exiting", leadership.fleet_id,
                     s.message());
      _exit(kLostLeaseExit);
    }
    (*daemon)->FenceRecord(leadership.fleet_id, term);
    leadership.fence->Lead(leadership.fleet_id, term,
                           [&leadership] { return leadership.HoldsNow(); });
    leadership.leading = true;
    if (!start_leading()) _exit(1);
    Log().info("leading fleet {} with term {} (record read and turns started in {})",
               leadership.fleet_id, term, absl::FormatDuration(absl::Now() - began));
  }
  Log().info("stopping (the servers keep running)");
  listener->reset();  // no new connection; the socket file goes with it
  if (!listen.empty()) unlink((state_dir + "/listen.addr").c_str());
  const bool stopped = fleet::daemon::StopWithin(stop_timeout, [&] {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server.reset();
    metrics_server.reset();
    // The webhooks stop before the record closes: deliveries not done stay pending in it.
    (*daemon)->SetDeliverySink(nullptr);
    notifier.reset();
    metrics.reset();
    daemon->reset();
    // Released last, once nothing of this fleetd writes: a standby takes over at once.
    leadership.stopping.store(true);
    if (leadership.owned) leadership.owned->Stop();
  });
  if (!stopped) {
    // Within systemd's TimeoutStopSec, on our own terms: every commit is whole in fleet.db, and
    // a remediation left "applying" is resolved by a probe at the next start.
    Log().error(
        "not stopped after {} (a remediation or an agent call still runs): exiting "
        "without it",
        absl::FormatDuration(stop_timeout));
    _exit(0);
  }
  // gRPC's last shutdown cleans up on a thread of its own; at exit that raced the callbacks
  // still finishing (an abort in gRPC's ref counting, seen on a 16-core machine). Everything of
  // ours that used gRPC is gone now: end it here, synchronously, before exit runs.
  grpc_shutdown_blocking();
  return 0;
}

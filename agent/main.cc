// fleet-agent: runs inside each container; one inference server per GPU. Wires the agent, serves
// agent.proto over gRPC, and runs until SIGTERM/SIGINT. Servers outlive it (they belong to their
// own sessions); in standalone mode it plays the daemon's part and stops them on exit.
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "agent/agent_service.h"
#include "agent/command_runner.h"
#include "agent/process_launcher.h"
#include "agent/readiness.h"
#include "agent/standalone.h"
#include "common/base/clock.h"
#include "common/base/flag_set.h"
#include "common/base/version.h"
#include "common/log/log.h"
#include "common/net/peer_checked_listener.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/server_posix.h"

namespace {

constexpr char kSummary[] =
    "The gpu-fleet agent: runs inside a container, launches one inference server per GPU (each in\n"
    "its own session, its log in a file), follows each log, names the root cause of a failed\n"
    "start, notices stalls (no log line, no build step, no CPU time), probes the CUDA toolchain\n"
    "the server will use, and applies typed fixes. It serves agent.proto; fleetd decides what to\n"
    "launch. Servers outlive the agent; a restarted agent re-adopts them.\n"
    "\n"
    "Standalone (no daemon): --standalone SPEC runs the servers of a text-format\n"
    "fleet.v1.StandaloneConfig, prints every event as a line, relaunches failed or stalled ones\n"
    "(max_attempts, backoff) and stops them on exit. With --until-ready it exits 0 once all are\n"
    "READY, 1 when one gave up. Example SPEC:\n"
    "  servers { server { gpu: 0 } port: 30000\n"
    "            argv: \"/venv/bin/python\" argv: \"-m\" argv: \"sglang.launch_server\"\n"
    "            argv: \"--model-path\" argv: \"/models/m\" argv: \"--port\" argv: \"30000\"\n"
    "            log_path: \"/workspace/sglang_logs/sglang_gpu0.log\"\n"
    "            readiness { path: \"/health_generate\" } }\n"
    "  max_attempts: 3 backoff { seconds: 5 }";

// The default --listen: a unix socket in the state dir (0600; the state dir is root's, 0700 under
// deploy/fleet-agent.service).
constexpr char kDefaultListen[] = "unix:STATE_DIR/agent.sock";

absl::Duration Seconds(double s) { return absl::Milliseconds(static_cast<int64_t>(s * 1000)); }

spdlog::logger& Log() { return fleet::log::Get(fleet::log::Component::kAgent); }

// A flag the agent cannot start with, said before logging is set up: "fleet-agent: ...", exit 1.
int UsageError(absl::string_view message) {
  std::cerr << "fleet-agent: " << message << "\n";
  return 1;
}

// Numeric ids only: the agent is linked statically and looks up no names (agent/CMakeLists.txt).
bool ParseIds(const char* flag, const std::vector<std::string>& texts, std::vector<uint32_t>* ids) {
  for (const std::string& text : texts) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(text, &id) || id == static_cast<uint32_t>(-1)) {
      Log().error(
          "flag --{}: '{}' is not a numeric id (names are not looked up: use `id -u NAME`, "
          "`getent group NAME`)",
          flag, text);
      return false;
    }
    ids->push_back(id);
  }
  return true;
}

// The whole of a PEM file, or an error naming the flag and the file.
bool ReadPem(const char* flag, const std::string& path, std::string* pem) {
  std::ifstream f(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) text.clear();
  if (!f.is_open() || text.empty()) {
    Log().error("--{} {}: cannot be read (no such file, no access, or empty)", flag, path);
    return false;
  }
  *pem = std::move(text);
  return true;
}

// The bytes of `fd` from `offset` to its end, at most the last 8 KiB of them.
std::string Tail(int fd, off_t offset) {
  std::string tail;
  if (fd < 0 || lseek(fd, offset, SEEK_SET) != offset) return tail;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    tail.append(buf, static_cast<size_t>(n));
    if (tail.size() > 8192) tail.erase(0, tail.size() - 8192);
  }
  return tail;
}

// --detach: the process that was started forks before any thread exists; the child makes its own
// session, writes its output to `log_file` (0600) and carries on; the parent waits until the
// child serves (it writes one byte on `ready_fd`) or dies, and exits 0 or 1 with the end of the
// log. The child's loggers then write to `log_file` too, rotated (main).
// That way `pct exec CTID -- fleet-agent --detach ...` returns once the agent is up, holding no
// stream of the SSH channel open, in a container with no service manager.
// Returns the write end in the child; exits in the parent.
int Detach(const std::string& log_file) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    Log().error("--detach: pipe: {}", std::strerror(errno));
    std::exit(1);
  }
  const int log = open(log_file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) {
    Log().error("--log-file {}: {}", log_file, std::strerror(errno));
    std::exit(1);
  }
  fchmod(log, 0600);  // an older log made wider
  const off_t log_start = lseek(log, 0, SEEK_END);
  const pid_t child = fork();
  if (child < 0) {
    Log().error("--detach: fork: {}", std::strerror(errno));
    std::exit(1);
  }
  if (child == 0) {
    close(ready[0]);
    setsid();
    const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    close(log);  // the loggers open the file themselves
    return ready[1];
  }
  close(ready[1]);
  char byte = 0;
  ssize_t n;
  while ((n = read(ready[0], &byte, 1)) < 0 && errno == EINTR) {
  }
  if (n == 1) std::exit(0);
  // The child died before serving: what it wrote says why (and what it wrote after the log
  // rotated, in the file the path names now).
  int status = 0;
  waitpid(child, &status, 0);
  std::string tail = Tail(log, log_start);
  struct stat opened;
  struct stat now;
  if (fstat(log, &opened) == 0 && stat(log_file.c_str(), &now) == 0 &&
      (opened.st_dev != now.st_dev || opened.st_ino != now.st_ino)) {
    const int current = open(log_file.c_str(), O_RDONLY | O_CLOEXEC);
    tail += Tail(current, 0);
    if (current >= 0) close(current);
  }
  std::cerr << tail;
  Log().error("--detach: the agent exited before serving (log {})", log_file);
  std::exit(1);
}

// --replace: the agent named by `pid_file` (one still running whose name is fleet-agent) is
// asked to stop (SIGTERM), and waited for up to `grace`, then killed. Its servers keep running;
// this agent re-adopts them. Used to upgrade an agent in place.
void ReplaceRunning(const std::string& pid_file, absl::Duration grace) {
  std::ifstream in(pid_file);
  long pid = 0;
  if (!(in >> pid) || pid <= 1 || pid == getpid()) return;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(comm, name) || name != "fleet-agent") return;  // gone, or a reused pid
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (fd < 0) return;
  Log().info("--replace: stopping the agent running as pid {}", pid);
  kill(static_cast<pid_t>(pid), SIGTERM);
  pollfd p{fd, POLLIN, 0};
  int rc;
  while ((rc = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(grace)))) < 0 &&
         errno == EINTR) {
  }
  if (rc == 0) {
    Log().warn("--replace: pid {} still runs; killing it", pid);
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
    while (poll(&p, 1, 5000) < 0 && errno == EINTR) {
    }
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  // glibc gives each thread that allocates its own malloc arena (up to 8 per core), each keeping
  // freed memory resident. The agent's threads (event loop, readiness, gRPC) allocate little:
  // two arenas save about 0.8 MiB of RSS (BENCHMARKS.md, agent footprint).
  mallopt(M_ARENA_MAX, 2);
  std::vector<std::string> args(argv + 1, argv + argc);
  bool version = false;
  bool until_ready = false;
  std::string listen = kDefaultListen;
  std::vector<std::string> allow_uids;
  std::vector<std::string> allow_gids;
  std::string port_file;
  std::string state_dir = "/var/lib/gpu-fleet-agent";
  std::string clock_offset_file;
  std::string standalone;
  std::string host = "local";
  std::string container = "local";
  double readiness_interval = 2;
  double sample_interval = 5;
  double stop_grace = 30;
  std::vector<std::string> jit_cache_roots;
  std::vector<std::string> toolkit_roots;
  fleet::agent::GpuGuardOptions gpu_guard;
  std::string dev_root = fleet::agent::AgentOptions().dev_root;
  int64_t gpu_free_mib = gpu_guard.free_threshold_mib;
  double gpu_wait = absl::ToDoubleSeconds(gpu_guard.max_wait);
  std::string http_probe = fleet::agent::ProcessReadinessProber::HelperNextToExecutable();
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool insecure_listen = false;
  bool detach = false;
  bool replace = false;
  std::string log_file;
  std::string log_level = "info";
  int64_t log_max_size = fleet::log::LogOptions().max_file_bytes;
  int64_t log_files = fleet::log::LogOptions().max_files;
  std::string pid_file;
  std::string db_vfs;
  std::string boot_id_file = fleet::agent::AgentStore::kBootIdPath;
  fleet::FlagSet flags("fleet-agent [flags]", kSummary);
  flags.AddBool("version", '\0', &version, "print the version and exit");
  flags.AddString("listen", '\0', &listen,
                  "where to serve agent.proto: unix:PATH (0600; only root, this agent's user and "
                  "--allow-uid/--allow-gid may connect: checked per connection), or a TCP "
                  "HOST:PORT (port 0: any free port) with --tls-* only; empty: nowhere",
                  "ADDR");
  flags.AddRepeated("allow-uid", '\0', &allow_uids,
                    "unix socket: this uid may connect too (numeric; repeatable)", "UID");
  flags.AddRepeated("allow-gid", '\0', &allow_gids,
                    "unix socket: members of this group may connect too (numeric; repeatable); "
                    "the socket is then 0660 with that group (the first given)",
                    "GID");
  flags.AddString("port-file", '\0', &port_file, "write the bound port here once serving", "FILE");
  flags.AddString("state-dir", '\0', &state_dir, "the agent's record (agent.db)", "DIR");
  flags.AddString("clock-offset-file", '\0', &clock_offset_file,
                  "testing: the wall clock the agent sees is the system's plus the signed seconds "
                  "in this file, read again every 100 ms (the fault matrix's clock-jump row)",
                  "FILE");
  flags.AddString("standalone", '\0', &standalone, "run the servers of this spec, no daemon",
                  "SPEC");
  flags.AddBool("until-ready", '\0', &until_ready,
                "standalone: exit once every server is READY (0) or one gave up (1)");
  flags.AddString("host", '\0', &host, "host name used in events", "NAME");
  flags.AddString("container", '\0', &container, "container id used in events", "CTID");
  flags.AddDouble("readiness-interval", '\0', &readiness_interval,
                  "seconds between readiness probes of a starting server", "S");
  flags.AddDouble("sample-interval", '\0', &sample_interval,
                  "seconds between CPU-time samples of a starting server's processes", "S");
  flags.AddDouble("stop-grace", '\0', &stop_grace, "seconds between SIGTERM and SIGKILL", "S");
  flags.AddRepeated("jit-cache-root", '\0', &jit_cache_roots,
                    "ClearJitCache may act below this directory (repeatable)", "DIR");
  flags.AddRepeated("toolkit-root", '\0', &toolkit_roots,
                    "Symlink may act below this directory (repeatable)", "DIR");
  flags.AddInt("gpu-free-mib", '\0', &gpu_free_mib,
               "a launch starts once its GPU's memory.used (nvidia-smi) is below this; 0: no GPU "
               "check before a launch",
               "MIB");
  flags.AddDouble("gpu-wait", '\0', &gpu_wait,
                  "how long a launch waits for a busy GPU before it fails, naming the holder", "S");
  flags.AddString("gpu-device", '\0', &gpu_guard.device_pattern,
                  "the device node of GPU N (%d: its minor number), whose holders are leftovers "
                  "or bystanders",
                  "PATTERN");
  flags.AddString("dev-root", '\0', &dev_root,
                  "the container's device dir: the probe reports the GPU device nodes a server "
                  "needs (nvidiaN, nvidiactl, nvidia-uvm) that are missing there or are no "
                  "character device; empty: not looked for",
                  "DIR");
  flags.AddString("http-probe", '\0', &http_probe,
                  "the readiness helper (fleet-http-probe) to run for each HTTP readiness check",
                  "PATH");
  flags.AddString("tls-cert", '\0', &tls_cert,
                  "mutual TLS: this agent's certificate (PEM; fleetctl certs init)", "FILE");
  flags.AddString("tls-key", '\0', &tls_key, "mutual TLS: the key of --tls-cert (PEM)", "FILE");
  flags.AddString("tls-ca", '\0', &tls_ca,
                  "mutual TLS: the fleet CA (PEM); a client must present a certificate it signed",
                  "FILE");
  flags.AddBool("insecure-listen", '\0', &insecure_listen,
                "INSECURE: serve a TCP --listen address (even 127.0.0.1) without TLS: every local "
                "user, and anyone who can reach the address, can launch processes as this agent's "
                "user (tests and benchmarks only)");
  flags.AddBool("detach", '\0', &detach,
                "run in the background (own session, output to --log-file); return once serving "
                "(0) or failed (1, with the log's end)");
  flags.AddString("log-level", '\0', &log_level,
                  "the least level logged: trace, debug, info, warn, error or off", "LEVEL");
  flags.AddString("log-file", '\0', &log_file,
                  "log lines go to this file instead of stderr (0600, appended, rotated by size: "
                  "agent.log becomes agent.1.log); with --detach, the agent's other output too",
                  "FILE");
  flags.AddInt("log-max-size", '\0', &log_max_size,
               "--log-file is rotated before it grows past this many bytes (10485760: 10 MiB)",
               "BYTES");
  flags.AddInt("log-files", '\0', &log_files,
               "rotated copies of --log-file kept besides it; the oldest is removed", "N");
  flags.AddString("pid-file", '\0', &pid_file, "write the agent's pid here once serving", "FILE");
  flags.AddString("db-vfs", '\0', &db_vfs,
                  "tests only: open agent.db with this SQLite VFS (fleet-powerloss: the fault "
                  "matrix's power-loss row, whose power cut then loses the unsynced writes); "
                  "default: SQLite's",
                  "NAME");
  flags.AddString("boot-id-file", '\0', &boot_id_file,
                  "tests only: the machine's boot id is read from here (a new one after a "
                  "simulated power cut: agent.db's lost-tail check)",
                  "FILE");
  flags.AddBool("replace", '\0', &replace,
                "stop the agent of --pid-file first (SIGTERM, then SIGKILL after --stop-grace); "
                "its servers keep running and are re-adopted");
  if (absl::Status s = flags.Parse(args); !s.ok()) return UsageError(s.message());
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (version) {
    std::cout << "fleet-agent " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  if (!flags.positional().empty()) {
    return UsageError(absl::StrCat("unexpected argument '", flags.positional()[0], "'"));
  }
  absl::StatusOr<spdlog::level::level_enum> level = fleet::log::ParseLevel(log_level);
  if (!level.ok()) return UsageError(absl::StrCat("--log-level: ", level.status().message()));
  // Log lines go to stderr, or --log-file; with --detach, to --log-file once detached (below):
  // until then whoever runs the agent sees them.
  fleet::log::LogOptions log_options;
  log_options.level = *level;
  log_options.max_file_bytes = log_max_size;
  log_options.max_files = log_files;
  if (!detach) log_options.file = log_file;
  if (absl::Status s = fleet::log::InitLogging(log_options); !s.ok()) {
    return UsageError(s.message());
  }

  // Mutual TLS, or loopback only: agent.proto launches processes, so a network listener without
  // client certificates is refused unless asked for by name.
  const int tls_given = !tls_cert.empty() + !tls_key.empty() + !tls_ca.empty();
  if (tls_given != 0 && tls_given != 3) {
    Log().error("--tls-cert, --tls-key and --tls-ca come together: give all three or none");
    return 1;
  }
  const bool tls = tls_given == 3;
  if (detach && log_file.empty()) {
    Log().error("--detach needs --log-file (its output goes there)");
    return 1;
  }
  if (replace && pid_file.empty()) {
    Log().error("--replace needs --pid-file (it names the agent to replace)");
    return 1;
  }
  // Before any thread: gRPC's and the agent's start below.
  const int ready_fd = detach ? Detach(log_file) : -1;
  if (detach) {
    log_options.file = log_file;
    log_options.capture_stdio = true;
    if (absl::Status s = fleet::log::InitLogging(log_options); !s.ok()) {
      Log().error("{}", s.message());  // on stderr, which is the log file already
      return 1;
    }
  }
  if (replace) ReplaceRunning(pid_file, Seconds(stop_grace) + absl::Seconds(5));
  if (listen == kDefaultListen) listen = absl::StrCat("unix:", state_dir, "/agent.sock");
  fleet::net::PeerPolicy peers;
  if (!ParseIds("allow-uid", allow_uids, &peers.uids) ||
      !ParseIds("allow-gid", allow_gids, &peers.gids)) {
    return 1;
  }
  // A unix socket's peers are checked by us (SO_PEERCRED); anything else a client can reach is
  // mutual TLS, or refused: a TCP port, even on loopback, is open to every local user, and
  // agent.proto launches processes as this agent's user (root).
  const bool unix_socket = absl::StartsWith(listen, "unix:");
  if (!listen.empty() && !unix_socket && !tls && !insecure_listen) {
    Log().error(
        "refusing to serve {} without TLS: every local user can reach a TCP port (even on "
        "loopback), and anyone who reaches it could launch processes here as uid {}. Listen on a "
        "unix socket (the default: unix:STATE_DIR/agent.sock), give --tls-cert, --tls-key and "
        "--tls-ca (fleetctl certs init), or pass --insecure-listen",
        listen, geteuid());
    return 1;
  }
  if (!listen.empty() && !unix_socket && !tls && insecure_listen) {
    Log().warn(
        "--insecure-listen: serving {} in plaintext: whoever reaches it can launch processes "
        "here as uid {}",
        listen, geteuid());
  }
  if ((!peers.uids.empty() || !peers.gids.empty()) && !unix_socket) {
    Log().error("--allow-uid and --allow-gid are for a unix socket --listen");
    return 1;
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls) {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!ReadPem("tls-ca", tls_ca, &ssl.pem_root_certs) ||
        !ReadPem("tls-key", tls_key, &pair.private_key) ||
        !ReadPem("tls-cert", tls_cert, &pair.cert_chain)) {
      return 1;
    }
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = grpc::SslServerCredentials(ssl);
  }

  // Checked now rather than at a server's first probe: without it no server ever becomes READY.
  if (access(http_probe.c_str(), X_OK) != 0) {
    Log().error(
        "readiness helper '{}' is not an executable file: install fleet-http-probe next to "
        "fleet-agent or pass --http-probe",
        http_probe);
    return 1;
  }

  // Orphans of a server (its children after it died) become ours, so the agent reaps them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::optional<fleet::v1::StandaloneConfig> config;
  if (!standalone.empty()) {
    auto c = fleet::agent::ReadStandaloneConfig(standalone);
    if (!c.ok()) {
      Log().error("{}", c.status().message());
      return 1;
    }
    config = *std::move(c);
  }

  const fleet::WallClock wall(clock_offset_file);
  // Timers run on the monotonic clock (common/base/clock.h): a step of the wall clock is said.
  fleet::RealClock clock(&wall, [](absl::Duration step) {
    Log().warn(
        "the wall clock stepped by {}: no timer moves; timestamps keep their frame until a "
        "restart",
        absl::FormatDuration(step));
  });
  fleet::agent::PosixProcessLauncher launcher;
  // Probes read long outputs (ldconfig -p is tens of KB); action results keep their own tails.
  fleet::agent::PosixCommandRunner runner(/*max_output=*/1 << 20);
  // HTTP readiness in a short-lived helper process (fleet-http-probe): a hung or crashing probe
  // never takes the agent with it.
  fleet::agent::ProcessReadinessProber prober(http_probe, &runner);
  fleet::agent::AgentOptions options;
  options.state_dir = state_dir;
  options.boot_id_path = boot_id_file;
  options.db_vfs = db_vfs;
  options.host = host;
  options.container = container;
  options.readiness_interval = Seconds(readiness_interval);
  options.progress_sample_interval = Seconds(sample_interval);
  options.stop_grace = Seconds(stop_grace);
  options.jit_cache_roots = jit_cache_roots;
  options.toolkit_roots = toolkit_roots;
  options.dev_root = dev_root;
  if (gpu_guard.device_pattern.find("%d") == std::string::npos) {
    Log().error("--gpu-device must hold %d (the GPU's minor number)");
    return 1;
  }
  // Before each launch: the GPU free, the previous server's leftovers reclaimed (gpu_guard.h).
  gpu_guard.free_threshold_mib = gpu_free_mib;
  gpu_guard.max_wait = Seconds(gpu_wait);
  std::unique_ptr<fleet::agent::GpuGuard> guard;
  if (gpu_free_mib > 0) {
    guard = std::make_unique<fleet::agent::GpuGuard>(gpu_guard, &runner, &clock);
    guard->Start();
  }
  auto agent =
      fleet::agent::Agent::Create(options, {&clock, &launcher, &prober, &runner, guard.get()});
  if (!agent.ok()) {
    Log().error("{}", agent.status().message());
    return 1;
  }
  (*agent)->Start();

  std::unique_ptr<fleet::agent::AgentService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<fleet::net::PeerCheckedListener> listener;
  if (!listen.empty()) {
    service = std::make_unique<fleet::agent::AgentService>(agent->get());
    grpc::ServerBuilder builder;
    int port = 0;
    // A unix socket without TLS is ours: each connection's peer is checked before gRPC sees it.
    const bool checked = unix_socket && !tls;
    if (checked) {
      fleet::net::ListenerOptions socket_options;
      socket_options.path = listen.substr(5);
      socket_options.policy = peers;
      if (!peers.gids.empty()) socket_options.group = peers.gids.front();
      auto l = fleet::net::PeerCheckedListener::Create(std::move(socket_options));
      if (!l.ok()) {
        Log().error("cannot serve on {}: {}", listen, l.status().message());
        return 1;
      }
      listener = *std::move(l);
    } else {
      builder.AddListeningPort(listen, credentials, &port);
    }
    fleet::agent::SetMessageLimits(&builder);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    if (server == nullptr || (!checked && port == 0)) {
      Log().error("cannot serve on {}{}", listen,
                  tls ? " (or the TLS certificate, key and CA do not fit together)" : "");
      return 1;
    }
    if (checked) {
      port = 0;
      grpc::Server* const serving = server.get();
      listener->Start(
          [serving](fleet::UniqueFd fd) { grpc::AddInsecureChannelFromFd(serving, fd.Release()); },
          [](const absl::Status& why) { Log().warn("{}", why.message()); });
      Log().info("{} (mode {}): each peer checked, only {} may connect", listen,
                 peers.gids.empty() ? "0600" : "0660", listener->Describe());
    } else if (unix_socket) {
      chmod(listen.substr(5).c_str(), 0600);  // gRPC made it; TLS checks the peer
    }
    if (!port_file.empty()) {
      std::ofstream(port_file + ".tmp") << port << "\n";
      std::rename((port_file + ".tmp").c_str(), port_file.c_str());
    }
    if (tls) {
      Log().info("mutual TLS: clients must present a certificate signed by {}", tls_ca);
    }
    // One line, one write (common/log/log.h): whoever waits for this line (a test, a deploy
    // script) never sees it without its port.
    Log().info("serving agent.proto on {}, incarnation {}",
               unix_socket ? listen : absl::StrCat("port ", port), (*agent)->incarnation());
  }
  if (!pid_file.empty()) {
    std::ofstream(pid_file + ".tmp") << getpid() << "\n";
    std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
  }
  if (ready_fd >= 0) {
    const char byte = 1;
    if (write(ready_fd, &byte, 1) != 1) {
      // The parent is gone: nobody waits for the answer.
    }
    close(ready_fd);
  }

  int exit_code = 0;
  if (config) {
    fleet::agent::StandaloneRunner standalone_runner(agent->get(), *config, &clock, &std::cout);
    std::thread signals([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      standalone_runner.RequestStop();
    });
    exit_code = standalone_runner.Run(until_ready);
    // Standalone owns its servers: stop them.
    for (const auto& s : config->servers()) {
      fleet::v1::StopRequest stop;
      *stop.mutable_server() = s.server();
      (*agent)->Stop(stop).IgnoreError();
    }
    pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
  } else {
    int sig = 0;
    sigwait(&stop_signals, &sig);
  }
  listener.reset();  // no new connection while gRPC shuts down
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server.reset();
  service.reset();
  agent->reset();
  return exit_code;
}

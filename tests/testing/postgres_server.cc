#include "tests/testing/postgres_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/errno_status.h"
#include "common/base/status_macros.h"
#include "tests/testing/eventually.h"

namespace fleet::testing {

namespace {

constexpr auto kStartTimeout = std::chrono::seconds(60);
constexpr auto kStopTimeout = std::chrono::seconds(30);
constexpr char kUser[] = "fleet";
constexpr char kDatabase[] = "fleet";

// initdb and postgres get this environment, nothing of ours: TZ spares initdb its scan of the
// zoneinfo files; C locale, so the cluster does not depend on the machine's.
std::map<std::string, std::string> ServerEnvironment() {
  return {{"PATH", "/usr/bin:/bin"}, {"LC_ALL", "C"}, {"TZ", "UTC"}};
}

std::string Tail(const std::string& text, size_t n = 2000) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

// Percent-encodes a URI component: unreserved characters and '/' stay.
std::string PercentEncode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// Whether `pid` is gone: no such process, or a zombie (reparented to an init that may not reap).
bool ProcessGone(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!stat || !std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z';
}

// The pids whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    if (!stat || !std::getline(stat, line)) continue;
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    // After ") ": state, then ppid.
    std::vector<std::string> fields = absl::StrSplit(line.substr(paren + 2), ' ');
    int ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      children.push_back(pid);
    }
  }
  closedir(proc);
  return children;
}

// Waits for our child `pid` until `timeout`; true when it was reaped.
bool WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  return Eventually(
      [&] {
        int status = 0;
        const pid_t r = waitpid(pid, &status, WNOHANG);
        return r == pid || (r < 0 && errno == ECHILD);
      },
      timeout, std::chrono::milliseconds(10));
}

}  // namespace

std::string PostgresServer::FindBinDir() {
  const char* path = std::getenv("PATH");
  const std::string on_path = FindOnPath("initdb", path != nullptr ? path : "");
  if (!on_path.empty()) {
    // Through links (a /usr/local/bin/initdb pointing into an install) to the install's own bin,
    // so that initdb and postgres are of one version.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(on_path, ec);
    const std::filesystem::path bin = (ec ? std::filesystem::path(on_path) : real).parent_path();
    if (access((bin / "postgres").c_str(), X_OK) == 0) return bin.string();
  }
  std::string best;
  int best_version = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    int version = 0;
    const std::string bin = (entry.path() / "bin").string();
    if (!absl::SimpleAtoi(entry.path().filename().string(), &version)) continue;
    if (access((bin + "/initdb").c_str(), X_OK) != 0) continue;
    if (access((bin + "/postgres").c_str(), X_OK) != 0) continue;
    if (version > best_version) {
      best_version = version;
      best = bin;
    }
  }
  return best;
}

std::vector<std::string> PostgresServer::AsOwner(std::vector<std::string> argv) const {
  if (!as_nobody_) return argv;
  std::vector<std::string> full = {"/usr/bin/setpriv", absl::StrCat("--reuid=", uid_),
                                   absl::StrCat("--regid=", gid_), "--clear-groups", "--"};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

absl::StatusOr<std::unique_ptr<PostgresServer>> PostgresServer::Start(const Options& options) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->bin_dir_ = FindBinDir();
  if (server->bin_dir_.empty()) {
    return absl::NotFoundError(
        "postgres: no initdb on PATH or in /usr/lib/postgresql/*/bin (deploy/install-deps.sh "
        "installs the postgresql package)");
  }
  server->password_ = options.password;
  if (!options.tcp_address.empty()) {
    if (options.password.empty()) {
      return absl::InvalidArgumentError("postgres: TCP only with a password");
    }
    // A port free now: bound to 0, read back, let go (the server binds it a moment later).
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    socklen_t len = sizeof addr;
    if (fd < 0 || inet_pton(AF_INET, options.tcp_address.c_str(), &addr.sin_addr) != 1 ||
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      return ErrnoToStatus(err, absl::StrCat("postgres: a port on ", options.tcp_address));
    }
    close(fd);
    server->port_ = std::to_string(ntohs(addr.sin_port));
  }
  server->data_dir_ = server->dir_.Join("data");
  server->log_path_ = server->dir_.Join("server.log");
  const std::string& dir = server->dir_.path();
  if (geteuid() == 0) {
    const passwd* nobody = getpwnam("nobody");
    if (nobody == nullptr) return absl::NotFoundError("postgres: running as root, no user nobody");
    server->as_nobody_ = true;
    server->uid_ = nobody->pw_uid;
    server->gid_ = nobody->pw_gid;
    if (chown(dir.c_str(), server->uid_, server->gid_) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("postgres: chown ", dir));
    }
  }

  std::vector<std::string> initdb = {server->bin_dir_ + "/initdb",
                                     "-D",
                                     server->data_dir_,
                                     "-U",
                                     kUser,
                                     "-E",
                                     "UTF8",
                                     "--locale=C",
                                     "--no-sync",
                                     "--no-instructions"};
  const std::string pwfile = server->dir_.Join("pwfile");
  if (options.password.empty()) {
    initdb.push_back("--auth=trust");
  } else {
    // The password reaches initdb in a file only it (and root) can read, removed after.
    const int fd = open(pwfile.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("postgres: ", pwfile));
    const std::string line = options.password + "\n";
    const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    const bool owned = !server->as_nobody_ || fchown(fd, server->uid_, server->gid_) == 0;
    close(fd);
    if (!written || !owned) return ErrnoToStatus(errno, absl::StrCat("postgres: ", pwfile));
    initdb.push_back("--auth=scram-sha-256");
    initdb.push_back("--pwfile=" + pwfile);
  }
  RunOptions run;
  run.env = ServerEnvironment();
  run.cwd = dir;
  run.output_path = server->dir_.Join("initdb.log");
  absl::StatusOr<RunResult> result = Run(server->AsOwner(initdb), run);
  unlink(pwfile.c_str());
  if (!result.ok()) return result.status();
  if (!result->exited || result->exit_code != 0) {
    return absl::InternalError(absl::StrCat("postgres: initdb failed: ", Tail(result->output)));
  }

  // Appended to initdb's postgresql.conf: the last setting wins. The socket dir's path is quoted
  // as the file's syntax wants ('' for a quote).
  std::string quoted_dir;
  for (char c : dir) {
    quoted_dir += c;
    if (c == '\'') quoted_dir += c;
  }
  {
    std::ofstream conf(server->data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "\n# tests/testing/postgres_server.cc\n"
         << "listen_addresses = '" << options.tcp_address << "'\n"
         << "port = " << server->port_ << "\n"
         << "unix_socket_directories = '" << quoted_dir << "'\n"
         << "unix_socket_permissions = 0700\n"
         << "fsync = on\n"
         << "shared_buffers = 16MB\n"
         << "max_connections = 20\n"
         << "max_wal_senders = 0\n"
         << "wal_level = minimal\n";
    for (const std::string& setting : options.settings) conf << setting << "\n";
    if (!conf) return absl::InternalError("postgres: cannot append to postgresql.conf");
  }
  if (!options.tcp_address.empty()) {
    std::ofstream hba(server->data_dir_ + "/pg_hba.conf", std::ios::app);
    hba << "host all all 0.0.0.0/0 scram-sha-256\n";
    if (!hba) return absl::InternalError("postgres: cannot append to pg_hba.conf");
  }
  FLEET_RETURN_IF_ERROR(server->Launch());

  // The database the tests use, made through the superuser's own database.
  const std::string& port = server->port_;
  const char* keywords[] = {"host", "port", "user", "password", "dbname", nullptr};
  const char* values[] = {dir.c_str(), port.c_str(), kUser, options.password.c_str(),
                          "postgres",  nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, 0);
  absl::Status made = absl::OkStatus();
  if (PQstatus(conn) != CONNECTION_OK) {
    made = absl::InternalError(absl::StrCat("postgres: connect: ", PQerrorMessage(conn)));
  } else {
    PGresult* res = PQexec(conn, absl::StrCat("CREATE DATABASE ", kDatabase).c_str());
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
      made = absl::InternalError(absl::StrCat("postgres: create database: ", PQerrorMessage(conn)));
    }
    PQclear(res);
  }
  PQfinish(conn);
  FLEET_RETURN_IF_ERROR(made);

  server->url_ = absl::StrCat("postgresql://", kUser,
                              options.password.empty() ? "" : ":" + PercentEncode(options.password),
                              "@/", kDatabase, "?host=", PercentEncode(dir),
                              server->port_ == "5432" ? "" : "&port=" + server->port_);
  if (!options.tcp_address.empty()) {
    server->tcp_url_ = absl::StrCat("postgresql://", kUser, ":", PercentEncode(options.password),
                                    "@", options.tcp_address, ":", server->port_, "/", kDatabase);
  }
  return server;
}

absl::Status PostgresServer::Launch() {
  RunOptions run;
  run.env = ServerEnvironment();
  run.cwd = dir_.path();
  run.output_path = log_path_;
  FLEET_ASSIGN_OR_RETURN(pid_, Spawn(AsOwner({bin_dir_ + "/postgres", "-D", data_dir_}), run));
  // Ready when it answers a ping (PQping needs no credentials); failed when it exits first.
  const std::string& port = port_;
  const char* keywords[] = {"host", "port", "dbname", "connect_timeout", nullptr};
  const char* values[] = {dir_.path().c_str(), port.c_str(), "postgres", "5", nullptr};
  bool exited = false;
  const bool ready = Eventually(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          exited = true;
          return true;
        }
        return PQpingParams(keywords, values, 0) == PQPING_OK;
      },
      kStartTimeout, std::chrono::milliseconds(10));
  if (exited || !ready) {
    if (!exited) {
      kill(pid_, SIGKILL);
      WaitExit(pid_, kStopTimeout);
    }
    pid_ = -1;
    return absl::InternalError(absl::StrCat(
        "postgres: server ", exited ? "exited at start" : "not ready in time", ": ", Tail(Log())));
  }
  return absl::OkStatus();
}

std::string PostgresServer::Log() const { return ReadFile(log_path_); }

absl::Status PostgresServer::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  const pid_t pid = std::exchange(pid_, -1);
  if (kill(pid, SIGINT) != 0 && errno != ESRCH) {
    return ErrnoToStatus(errno, absl::StrCat("postgres: signal ", pid));
  }
  if (WaitExit(pid, kStopTimeout)) return absl::OkStatus();
  kill(pid, SIGKILL);
  WaitExit(pid, kStopTimeout);
  return absl::DeadlineExceededError(
      absl::StrCat("postgres: no fast shutdown in 30 s, killed: ", Tail(Log())));
}

absl::Status PostgresServer::Kill() {
  if (pid_ <= 0) return absl::FailedPreconditionError("postgres: not running");
  const pid_t pid = std::exchange(pid_, -1);
  // Stopped first, so that it forks no child while they are listed.
  kill(pid, SIGSTOP);
  const std::vector<pid_t> children = ChildrenOf(pid);
  for (pid_t child : children) kill(child, SIGKILL);
  kill(pid, SIGKILL);
  if (!WaitExit(pid, kStopTimeout)) {
    return absl::DeadlineExceededError(absl::StrCat("postgres: ", pid, " survived SIGKILL"));
  }
  const bool gone = Eventually(
      [&] {
        for (pid_t child : children) {
          if (!ProcessGone(child)) return false;
        }
        return true;
      },
      kStopTimeout, std::chrono::milliseconds(10));
  if (!gone) return absl::DeadlineExceededError("postgres: a child survived SIGKILL");
  return absl::OkStatus();
}

absl::Status PostgresServer::Restart() {
  FLEET_RETURN_IF_ERROR(Stop());
  return Launch();
}

PostgresServer::~PostgresServer() {
  if (pid_ > 0) Stop().IgnoreError();
}

}  // namespace fleet::testing

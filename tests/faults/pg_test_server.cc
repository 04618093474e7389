// pg-test-server: a real PostgreSQL server for the fault matrix's PostgreSQL runs
// (tests/faults/run.sh --store postgres), started without a shell and without a system service:
// tests/testing/postgres_server.h's PostgresServer (initdb and postgres in a temp dir of their
// own, as `nobody` under root, a unix socket only) with a random password.
//
//   pg-test-server URL_FILE
//
// Writes the database's URL (with its password) into URL_FILE, mode 0600, for fleetd
// --store-file and fault-check --store-file; the URL and the password are never printed. Prints
// `ready` once the server accepts connections, then runs until SIGTERM or SIGINT (the server
// stopped, its dir removed, exit 0). SIGUSR1 is a database crash: the server killed (SIGKILL,
// every process of it) and started again on the same data (crash recovery); prints `restarted N`
// (N counts them) once it accepts connections again, or `restart failed` and exits 1.
// Exits 77 when there are no PostgreSQL binaries, 1 when the server cannot start, 2 on usage.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "tests/testing/postgres_server.h"

namespace {

// 16 random bytes as hex: the superuser's password, never printed.
std::string RandomPassword() {
  char bytes[16];
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, bytes, sizeof(bytes)) != static_cast<ssize_t>(sizeof(bytes))) {
    if (fd >= 0) close(fd);
    return "";
  }
  close(fd);
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

// Writes `url` into `path` (mode 0600) through a temp file renamed over it, so a reader never
// sees half a URL.
bool WriteUrlFile(const std::string& path, const std::string& url) {
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const std::string line = url + "\n";
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (close(fd) != 0 || !written) return false;
  return rename(tmp.c_str(), path.c_str()) == 0;
}

void Say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: pg-test-server URL_FILE\n");
    return 2;
  }
  const std::string url_file = argv[1];
  if (fleet::testing::PostgresServer::FindBinDir().empty()) {
    std::fprintf(stderr, "pg-test-server: no PostgreSQL binaries (initdb)\n");
    return 77;
  }
  // Blocked before any thread or child exists, then taken by sigwait: no handler runs.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  fleet::testing::PostgresServer::Options options;
  options.password = RandomPassword();
  if (options.password.empty()) {
    std::fprintf(stderr, "pg-test-server: cannot read /dev/urandom\n");
    return 1;
  }
  auto server = fleet::testing::PostgresServer::Start(options);
  if (!server.ok()) {
    // The message carries the server's log, never the password.
    std::fprintf(stderr, "pg-test-server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  if (!WriteUrlFile(url_file, (*server)->url())) {
    std::fprintf(stderr, "pg-test-server: cannot write %s\n", url_file.c_str());
    return 1;
  }
  std::fprintf(stderr, "pg-test-server: postgres (pid %d) in %s\n", (*server)->pid(),
               (*server)->socket_dir().c_str());
  Say("ready");
  int restarts = 0;
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig != SIGUSR1) break;
    absl::Status killed = (*server)->Kill();
    absl::Status started = killed.ok() ? (*server)->Restart() : killed;
    if (!started.ok()) {
      std::fprintf(stderr, "pg-test-server: crash and restart: %s\n",
                   std::string(started.message()).c_str());
      Say("restart failed");
      return 1;
    }
    ++restarts;
    std::fprintf(stderr, "pg-test-server: killed and restarted (pid %d)\n", (*server)->pid());
    std::printf("restarted %d\n", restarts);
    std::fflush(stdout);
  }
  absl::Status stopped = (*server)->Stop();
  if (!stopped.ok()) {
    std::fprintf(stderr, "pg-test-server: stop: %s\n", std::string(stopped.message()).c_str());
  }
  server->reset();  // the dir removed
  unlink(url_file.c_str());
  return stopped.ok() ? 0 : 1;
}

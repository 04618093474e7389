// PostgresServer: a real PostgreSQL server for a test, in a temp dir of its own, reachable only
// through a unix socket in that dir (listen_addresses = '': no TCP port, so servers of tests run
// in parallel never meet). The binaries are Debian's (/usr/lib/postgresql/N/bin, not on PATH) or
// the first initdb on PATH.
//
// PostgreSQL refuses to run as root: under root the cluster belongs to `nobody` (the dir is
// chowned to it) and initdb and postgres are started through `setpriv --reuid --regid
// --clear-groups`, which execs, so the postmaster is our child. Under another user they run as
// that user. postgres is started directly (argv, own process group, reaped here) rather than
// through pg_ctl, which runs it from a shell command line; Stop() sends what `pg_ctl stop -m fast`
// sends (SIGINT) and waits.
//
// Authentication: with no password (the default) the socket trusts its clients (`initdb -A trust`):
// the socket is in a 0700 dir, so only its owner and root reach it. With Options::password the
// superuser `fleet` has that password (given to initdb in a 0600 file, never in argv) and every
// connection must give it (scram-sha-256).
//
// The destructor stops the server and removes the dir; a test process that dies without running
// it (an abort, SIGKILL) leaves its postgres running in /tmp/fleet-test-*, as nothing tells a
// postmaster that its parent went away.
//
// Not thread-safe: one test thread drives it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/testing/subprocess.h"

namespace fleet::testing {

class PostgresServer {
 public:
  struct Options {
    // Empty: trust on the socket. Else the superuser's password (scram-sha-256).
    std::string password;
    // Also listen on TCP at this address (an IPv4 address of this machine, e.g. a veth's in a
    // test's network namespace), on a port free when it started; clients of any address must
    // give the password (required then). Empty: the socket only.
    std::string tcp_address;
    // More postgresql.conf lines ("name = value"), written after this file's own settings, so
    // that they win (bench/daemon runs with PostgreSQL's default shared_buffers, not 16MB).
    std::vector<std::string> settings;
  };

  // The directory holding initdb and postgres: the one of the first initdb on PATH, else the
  // newest /usr/lib/postgresql/N/bin; "" when there is none (tests skip then).
  static std::string FindBinDir();

  // initdb, start, and a database `fleet` owned by the superuser `fleet`. NotFound without the
  // binaries; Internal (with the server's log) when initdb or the start fails.
  static absl::StatusOr<std::unique_ptr<PostgresServer>> Start(const Options& options);
  static absl::StatusOr<std::unique_ptr<PostgresServer>> Start() { return Start(Options{}); }

  // Stops the server (as Stop) and removes the dir.
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // A libpq URI for the database `fleet` as the superuser, with the password when there is one:
  // postgresql://fleet@/fleet?host=DIR (keep it out of argv and logs).
  const std::string& url() const { return url_; }
  const std::string& password() const { return password_; }
  // With Options::tcp_address: postgresql://fleet:PASSWORD@ADDRESS:PORT/fleet; else "".
  const std::string& tcp_url() const { return tcp_url_; }
  const std::string& socket_dir() const { return dir_.path(); }
  bool running() const { return pid_ > 0; }
  // The postmaster's pid (-1 when not running), for measuring the server's processes.
  pid_t pid() const { return pid_; }
  // What the server wrote to its stderr (its log), for a failing test's message.
  std::string Log() const;

  // A fast shutdown (SIGINT: clients disconnected, a checkpoint written), waited for; SIGKILL
  // after 30 s. OK when not running.
  absl::Status Stop();
  // A crash: the postmaster stopped, its children and then itself killed with SIGKILL, and all
  // of them waited for (the next start runs crash recovery).
  absl::Status Kill();
  // Stops the server if it runs, then starts it again on the same data and waits until it
  // accepts connections.
  absl::Status Restart();

 private:
  PostgresServer() = default;
  std::vector<std::string> AsOwner(std::vector<std::string> argv) const;
  absl::Status Launch();

  TempDir dir_;
  std::string bin_dir_;
  std::string data_dir_;
  std::string log_path_;
  std::string password_;
  std::string url_;
  std::string tcp_url_;
  std::string port_ = "5432";  // the socket's name too (.s.PGSQL.PORT)
  bool as_nobody_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  pid_t pid_ = -1;
};

}  // namespace fleet::testing

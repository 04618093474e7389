// SshSession against a real OpenSSH server on loopback. The test owns the listening socket (port
// 0, so no fixed port and no race for one) and starts `sshd -i` (inetd mode) for each connection
// it accepts, with the connection as its stdin and stdout: no waiting for a daemon to come up.
// Each test has its own host keys, user keys, authorized_keys and sshd_config in a temp dir.
#include "daemon/ssh/ssh_session.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/spawn.h"
#include "daemon/ssh/ssh_reach.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::daemon {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kSshd[] = "/usr/sbin/sshd";
constexpr char kSshKeygen[] = "/usr/bin/ssh-keygen";

// Why these tests cannot run here, or "" when they can.
std::string SkipReason() {
  if (access(kSshd, X_OK) != 0) {
    return "no /usr/sbin/sshd (deploy/install-deps.sh installs openssh-server)";
  }
  if (access(kSshKeygen, X_OK) != 0) return "no /usr/bin/ssh-keygen (openssh-client)";
  if (geteuid() != 0) {
    return "needs root: sshd's privilege separation and a login as the test's user need it";
  }
  // sshd's privilege separation directory; systemd makes it only when it runs ssh.service, which
  // install-deps.sh keeps from running.
  if (mkdir("/run/sshd", 0755) != 0 && errno != EEXIST) {
    return absl::StrCat("cannot create /run/sshd: ", std::strerror(errno));
  }
  return "";
}

std::string CurrentUser() {
  const passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : "root";
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

class SshSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    for (const char* key : {"host_key", "other_host_key", "user_key", "stranger_key"}) {
      MakeKey(key);
    }
    dir_.WriteFile("authorized_keys", fleet::testing::ReadFile(dir_.Join("user_key.pub")));
    UseHostKey("host_key");

    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listen_fd_, 0) << std::strerror(errno);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ASSERT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof addr;
    ASSERT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  void TearDown() override {
    if (listen_fd_ >= 0) {
      // Wakes the blocked accept() (it fails with EINVAL), so the loop ends.
      shutdown(listen_fd_, SHUT_RDWR);
      if (acceptor_.joinable()) acceptor_.join();
      close(listen_fd_);
    }
    absl::MutexLock lock(&mu_);
    for (pid_t pid : sshd_pids_) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (HasFailure()) std::fprintf(stderr, "sshd log:\n%s\n", SshdLog().c_str());
  }

  void MakeKey(const std::string& name) {
    absl::StatusOr<fleet::testing::RunResult> run = fleet::testing::Run(
        {kSshKeygen, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", dir_.Join(name)});
    ASSERT_TRUE(run.ok() && run->exited && run->exit_code == 0) << name;
  }

  // The server presents `key` (a file in the test's dir) from the next connection on.
  void UseHostKey(const std::string& key) {
    dir_.WriteFile("sshd_config",
                   absl::StrCat("HostKey ", dir_.Join(key), "\n", "AuthorizedKeysFile ",
                                dir_.Join("authorized_keys"), "\n",
                                "StrictModes no\n"
                                "UsePAM no\n"
                                "PermitRootLogin prohibit-password\n"
                                "PubkeyAuthentication yes\n"
                                "PasswordAuthentication no\n"
                                "KbdInteractiveAuthentication no\n"
                                "UseDNS no\n"
                                "PrintMotd no\n"
                                "PidFile none\n"
                                "LogLevel VERBOSE\n"));
  }

  // "SHA256:..." of a key file's public half, as OpenSSH computes it.
  std::string Fingerprint(const std::string& key) {
    fleet::testing::RunOptions options;
    options.output_path = dir_.Join(key + ".fingerprint");
    absl::StatusOr<fleet::testing::RunResult> run = fleet::testing::Run(
        {kSshKeygen, "-l", "-E", "sha256", "-f", dir_.Join(key + ".pub")}, options);
    EXPECT_TRUE(run.ok() && run->exited && run->exit_code == 0);
    std::vector<std::string> fields = absl::StrSplit(run->output, ' ');
    return fields.size() > 1 ? fields[1] : "";
  }

  SshOptions Options() const {
    SshOptions options;
    options.host_name = "pve1";
    options.address = "127.0.0.1";
    options.port = port_;
    options.user = CurrentUser();
    options.identity_file = dir_.Join("user_key");
    options.known_hosts_path = dir_.Join("known_hosts");
    options.connect_timeout = absl::Seconds(20);
    options.command_timeout = absl::Seconds(60);
    return options;
  }

  // A fleet config with a local host and pve1, reached over ssh at the test's sshd; pve1's
  // known_hosts is left to its default, STATE_DIR/known_hosts with StateDir() as STATE_DIR.
  fleet::v1::FleetConfig Config() const {
    fleet::v1::FleetConfig config;
    fleet::v1::Host* local = config.add_hosts();
    local->set_name("local");
    local->mutable_reach()->set_kind(fleet::v1::Reach::LOCAL);
    local->add_containers()->set_ctid("200");
    fleet::v1::Host* host = config.add_hosts();
    host->set_name("pve1");
    fleet::v1::Reach* reach = host->mutable_reach();
    reach->set_kind(fleet::v1::Reach::SSH);
    reach->set_address("127.0.0.1");
    reach->set_port(port_);
    reach->set_user(CurrentUser());
    reach->set_identity_file(dir_.Join("user_key"));
    reach->mutable_connect_timeout()->set_seconds(20);
    host->add_containers()->set_ctid("200");
    host->add_containers()->set_ctid("201");
    return config;
  }
  const std::string& StateDir() const { return dir_.path(); }
  std::string StateKnownHosts() const { return dir_.Join("known_hosts"); }

  std::unique_ptr<SshSession> TrustAndConnect(const SshOptions& options) {
    absl::StatusOr<HostKeyScan> trusted = SshSession::TrustHost(options);
    EXPECT_TRUE(trusted.ok()) << trusted.status();
    absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  std::string SshdLog() const { return fleet::testing::ReadFile(dir_.Join("sshd.log")); }

  fleet::testing::TempDir dir_;
  int port_ = 0;

 private:
  void AcceptLoop() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 && (errno == EINTR || errno == ECONNABORTED)) continue;
      if (fd < 0) return;
      SpawnSshd(fd);
      close(fd);
    }
  }

  // `sshd -i` on the accepted connection, in its own process group (TearDown kills the group),
  // with no other descriptor of ours (a client socket leaked into it would keep that
  // connection open).
  void SpawnSshd(int fd) {
    const std::string config = dir_.Join("sshd_config");
    const std::string log = dir_.Join("sshd.log");
    SpawnSpec spec;
    spec.argv = {kSshd, "-i", "-e", "-f", config};
    spec.in = SpawnStream::Fd(fd);
    spec.out = SpawnStream::Fd(fd);
    spec.err = SpawnStream::FileToAppend(log);
    spec.close_other_fds = true;
    spec.group = SpawnGroup::kOwnGroup;
    absl::StatusOr<pid_t> pid = SpawnProcess(spec);
    if (!pid.ok()) {
      ADD_FAILURE() << pid.status();
      return;
    }
    absl::MutexLock lock(&mu_);
    sshd_pids_.push_back(*pid);
  }

  int listen_fd_ = -1;
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<pid_t> sshd_pids_ ABSL_GUARDED_BY(mu_);
};

TEST_F(SshSessionTest, RunsCommandAndReturnsExitStatusAndOutput) {
  std::unique_ptr<SshSession> session = TrustAndConnect(Options());
  ASSERT_NE(session, nullptr);
  absl::StatusOr<CommandResult> result =
      session->Run({"sh", "-c", "echo out; echo err >&2; exit 3"}, "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 3);
  EXPECT_EQ(result->exit_signal, "");
  EXPECT_EQ(result->out, "out\n");
  EXPECT_EQ(result->err, "err\n");
  EXPECT_FALSE(result->out_truncated);
  EXPECT_FALSE(result->err_truncated);
  EXPECT_TRUE(session->connected());
}

TEST_F(SshSessionTest, FeedsStdinAndReusesTheSession) {
  SshOptions options = Options();
  options.max_output_bytes = size_t{8} << 20;
  std::unique_ptr<SshSession> session = TrustAndConnect(options);
  ASSERT_NE(session, nullptr);
  // Larger than an SSH channel window, so writing it needs the remote side to read.
  std::string input;
  for (int i = 0; input.size() < (size_t{3} << 20); ++i) absl::StrAppend(&input, "line ", i, "\n");
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<CommandResult> result = session->Run({"cat"}, input, absl::ZeroDuration());
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->exit_status, 0);
    EXPECT_EQ(result->out.size(), input.size());
    EXPECT_TRUE(result->out == input);
  }
  absl::StatusOr<CommandResult> empty = session->Run({"cat"}, "", absl::ZeroDuration());
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->out, "");
}

TEST_F(SshSessionTest, HostileArgumentsArriveVerbatimAndInjectNothing) {
  std::unique_ptr<SshSession> session = TrustAndConnect(Options());
  ASSERT_NE(session, nullptr);
  const std::string d = dir_.path();
  const std::vector<std::string> args = {"two words",
                                         "",
                                         "it's",
                                         "\"quoted\" 'twice'",
                                         "a; touch " + d + "/semicolon",
                                         "$(touch " + d + "/dollar)",
                                         "`touch " + d + "/backtick`",
                                         "x && touch " + d + "/and",
                                         "| touch " + d + "/pipe",
                                         "> " + d + "/redirect",
                                         "line one\nline two\n",
                                         "*",
                                         "/*",
                                         "-rf",
                                         "--",
                                         "A=b",
                                         "$HOME ${PATH}",
                                         "~",
                                         "back\\slash",
                                         "\t!#{a,b}[x]?"};
  std::vector<std::string> argv = {"printf", "%s\\0"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<CommandResult> result = session->Run(argv, "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 0) << result->err;
  std::vector<std::string> printed = absl::StrSplit(result->out, '\0');
  ASSERT_FALSE(printed.empty());
  EXPECT_EQ(printed.back(), "");
  printed.pop_back();
  EXPECT_EQ(printed, args);
  for (const char* marker : {"semicolon", "dollar", "backtick", "and", "pipe", "redirect"}) {
    EXPECT_FALSE(Exists(dir_.Join(marker))) << marker << " was created";
  }
}

TEST_F(SshSessionTest, UnknownHostKeyIsRefusedWithItsFingerprint) {
  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(Options());
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(session.status().message()),
            absl::StrCat("host pve1: ssh host key unknown (", Fingerprint("host_key"),
                         "); run fleetctl hosts trust pve1"));
}

TEST_F(SshSessionTest, TrustHostRecordsTheKeyThenConnectSucceeds) {
  const SshOptions options = Options();
  absl::StatusOr<HostKeyScan> trusted = SshSession::TrustHost(options);
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_EQ(trusted->key.fingerprint, Fingerprint("host_key"));
  EXPECT_THAT(trusted->key.fingerprint, StartsWith("SHA256:"));
  EXPECT_EQ(trusted->key.type, "ssh-ed25519");
  EXPECT_EQ(trusted->state, HostKeyScan::State::kNew);
  EXPECT_TRUE(trusted->recorded.empty());
  // Trusting again leaves one entry.
  ASSERT_TRUE(SshSession::TrustHost(options).ok());
  const std::string known_hosts = fleet::testing::ReadFile(options.known_hosts_path);
  EXPECT_THAT(known_hosts, StartsWith(absl::StrCat("[127.0.0.1]:", port_, " ssh-ed25519 ")));
  EXPECT_EQ(std::count(known_hosts.begin(), known_hosts.end(), '\n'), 1) << known_hosts;

  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->host_key_fingerprint(), trusted->key.fingerprint);
  absl::StatusOr<CommandResult> result = (*session)->Run({"true"}, "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 0);
}

TEST_F(SshSessionTest, TrustHostRefusesAKeyOtherThanTheExpectedOne) {
  const SshOptions options = Options();
  absl::StatusOr<HostKeyScan> trusted =
      SshSession::TrustHost(options, Fingerprint("other_host_key"));
  ASSERT_FALSE(trusted.ok());
  EXPECT_EQ(trusted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(trusted.status().message()), HasSubstr(Fingerprint("host_key")));
  EXPECT_FALSE(Exists(options.known_hosts_path));
  EXPECT_TRUE(SshSession::TrustHost(options, Fingerprint("host_key")).ok());
}

TEST_F(SshSessionTest, ChangedHostKeyIsRefusedUntilTrustedAgain) {
  const SshOptions options = Options();
  // Another host's entry, which re-trusting pve1 must keep.
  const std::string other_entry =
      "pve2.example " + fleet::testing::ReadFile(dir_.Join("stranger_key.pub"));
  dir_.WriteFile("known_hosts", other_entry);
  ASSERT_TRUE(SshSession::TrustHost(options).ok());
  UseHostKey("other_host_key");

  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(session.status().message()),
              StartsWith(absl::StrCat("host pve1: ssh host key changed (now ",
                                      Fingerprint("other_host_key"), ")")));
  EXPECT_THAT(std::string(session.status().message()), HasSubstr("run fleetctl hosts trust pve1"));

  absl::StatusOr<HostKeyScan> trusted = SshSession::TrustHost(options);
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_EQ(trusted->key.fingerprint, Fingerprint("other_host_key"));
  const std::string known_hosts = fleet::testing::ReadFile(options.known_hosts_path);
  EXPECT_THAT(known_hosts, StartsWith(other_entry));
  EXPECT_EQ(std::count(known_hosts.begin(), known_hosts.end(), '\n'), 2) << known_hosts;
  session = SshSession::Connect(options);
  ASSERT_TRUE(session.ok()) << session.status();

  // And the old key is no longer trusted.
  UseHostKey("host_key");
  session = SshSession::Connect(options);
  ASSERT_FALSE(session.ok());
  EXPECT_THAT(std::string(session.status().message()), HasSubstr("ssh host key changed"));
}

TEST_F(SshSessionTest, WrongUserKeyIsRefusedWithAClearError) {
  SshOptions options = Options();
  ASSERT_TRUE(SshSession::TrustHost(options).ok());
  options.identity_file = dir_.Join("stranger_key");
  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(session.status().message()),
              StartsWith("host pve1: ssh auth: permission denied (publickey)"));
}

TEST_F(SshSessionTest, MissingIdentityFileIsNamed) {
  SshOptions options = Options();
  ASSERT_TRUE(SshSession::TrustHost(options).ok());
  options.identity_file = dir_.Join("no_such_key");
  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(session.status().message()), HasSubstr(options.identity_file));
}

TEST_F(SshSessionTest, AuthenticatesWithTheSshAgent) {
  const std::string socket_path = dir_.Join("agent.sock");
  fleet::testing::RunOptions run_options;
  run_options.output_path = dir_.Join("agent.out");
  // Without -D the agent forks into the background once its socket is listening: when this
  // returns, it is ready.
  absl::StatusOr<fleet::testing::RunResult> agent =
      fleet::testing::Run({"/usr/bin/ssh-agent", "-s", "-a", socket_path}, run_options);
  ASSERT_TRUE(agent.ok() && agent->exited && agent->exit_code == 0);
  pid_t agent_pid = -1;
  for (absl::string_view part : absl::StrSplit(agent->output, absl::ByAnyChar(";\n"))) {
    if (absl::ConsumePrefix(&part, "SSH_AGENT_PID="))
      agent_pid = std::atoi(std::string(part).c_str());
  }
  ASSERT_GT(agent_pid, 0) << agent->output;
  struct KillAgent {
    pid_t pid;
    ~KillAgent() { kill(pid, SIGTERM); }
  } kill_agent{agent_pid};
  fleet::testing::RunOptions add_options;
  add_options.env = fleet::testing::CurrentEnvironment();
  (*add_options.env)["SSH_AUTH_SOCK"] = socket_path;
  absl::StatusOr<fleet::testing::RunResult> add =
      fleet::testing::Run({"/usr/bin/ssh-add", "-q", dir_.Join("user_key")}, add_options);
  ASSERT_TRUE(add.ok() && add->exited && add->exit_code == 0);

  SshOptions options = Options();
  options.identity_file = "";
  options.agent_socket = socket_path;
  std::unique_ptr<SshSession> session = TrustAndConnect(options);
  ASSERT_NE(session, nullptr);
  absl::StatusOr<CommandResult> result =
      session->Run({"echo", "via agent"}, "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->out, "via agent\n");
}

TEST_F(SshSessionTest, ConnectFailureNamesHostAndAddress) {
  // A bound socket that does not listen: connecting to its port is refused, and no other
  // process can take the port meanwhile.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  SshOptions options = Options();
  options.port = ntohs(addr.sin_port);
  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  close(fd);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(session.status().message()),
              StartsWith(absl::StrCat("host pve1: ssh connect: 127.0.0.1:", options.port, ": ")));
}

TEST_F(SshSessionTest, CommandPastItsTimeoutIsKilledAndTheSessionStaysUsable) {
  std::unique_ptr<SshSession> session = TrustAndConnect(Options());
  ASSERT_NE(session, nullptr);
  const std::string pid_file = dir_.Join("sleeper.pid");
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> result = session->Run(
      {"sh", "-c", "echo $$ > " + pid_file + "; exec sleep 60"}, "", absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(result.status().message()), StartsWith("host pve1: ssh run `sh -c "));
  EXPECT_THAT(std::string(result.status().message()), EndsWith("still running after 500ms"));
  EXPECT_LT(took, absl::Seconds(10));

  // The host's `timeout` kills it a second later (sshd ignores signal requests for root): wait
  // for that process to end (bounded by the inner timeout), then check that it is gone.
  absl::StatusOr<CommandResult> gone = session->Run(
      {"sh", "-c",
       "pid=$(cat \"$1\") && timeout 20 tail --pid=\"$pid\" -f /dev/null && ! kill -0 \"$pid\"",
       "sh", pid_file},
      "", absl::ZeroDuration());
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->exit_status, 0) << "the timed-out command is still running: " << gone->err;

  absl::StatusOr<CommandResult> next = session->Run({"echo", "next"}, "", absl::ZeroDuration());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->out, "next\n");
  EXPECT_TRUE(session->connected());
}

TEST_F(SshSessionTest, OutputKeepsItsLastBytes) {
  SshOptions options = Options();
  options.max_output_bytes = 1000;
  std::unique_ptr<SshSession> session = TrustAndConnect(options);
  ASSERT_NE(session, nullptr);
  absl::StatusOr<CommandResult> result =
      session->Run({"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a; printf END; printf E >&2"},
                   "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 0);
  EXPECT_EQ(result->out.size(), 1000u);
  EXPECT_THAT(result->out, EndsWith("aaaEND"));
  EXPECT_TRUE(result->out_truncated);
  EXPECT_EQ(result->err, "E");
  EXPECT_FALSE(result->err_truncated);
}

TEST_F(SshSessionTest, ReportsDeathBySignal) {
  std::unique_ptr<SshSession> session = TrustAndConnect(Options());
  ASSERT_NE(session, nullptr);
  absl::StatusOr<CommandResult> result =
      session->Run({"sh", "-c", "kill -TERM $$"}, "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, -1);
  EXPECT_EQ(result->exit_signal, "TERM");
}

TEST_F(SshSessionTest, ConcurrentRunsOnOneSessionAreSerialised) {
  std::unique_ptr<SshSession> session = TrustAndConnect(Options());
  ASSERT_NE(session, nullptr);
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<CommandResult> result =
          session->Run({"echo", absl::StrCat("thread ", i)}, "", absl::ZeroDuration());
      if (result.ok()) outputs[i] = result->out;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(outputs[i], absl::StrCat("thread ", i, "\n"));
}

// --- The two steps of `fleetctl hosts trust HOST`: scan, then record what was seen. ---

TEST_F(SshSessionTest, ScanShowsAnUnknownKeyAndRecordsNothing) {
  const SshOptions options = Options();
  absl::StatusOr<HostKeyScan> scan = SshSession::ScanHostKey(options);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(scan->key.fingerprint, Fingerprint("host_key"));
  EXPECT_EQ(scan->key.type, "ssh-ed25519");
  EXPECT_EQ(scan->state, HostKeyScan::State::kNew);
  EXPECT_EQ(HostKeyStateName(scan->state), "new");
  EXPECT_THAT(scan->recorded, IsEmpty());
  EXPECT_FALSE(Exists(options.known_hosts_path));
  // Still refused, with the fingerprint the scan showed.
  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  ASSERT_FALSE(session.ok());
  EXPECT_THAT(std::string(session.status().message()), HasSubstr(scan->key.fingerprint));
}

TEST_F(SshSessionTest, ScanTellsTrustedFromChangedAndRecordsNothing) {
  const SshOptions options = Options();
  ASSERT_TRUE(SshSession::TrustHost(options, Fingerprint("host_key")).ok());
  absl::StatusOr<HostKeyScan> trusted = SshSession::ScanHostKey(options);
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_EQ(trusted->state, HostKeyScan::State::kTrusted);
  ASSERT_EQ(trusted->recorded.size(), 1u);
  EXPECT_EQ(trusted->recorded[0].fingerprint, Fingerprint("host_key"));
  EXPECT_EQ(trusted->recorded[0].type, "ssh-ed25519");

  UseHostKey("other_host_key");
  const std::string before = fleet::testing::ReadFile(options.known_hosts_path);
  absl::StatusOr<HostKeyScan> changed = SshSession::ScanHostKey(options);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(changed->state, HostKeyScan::State::kChanged);
  EXPECT_EQ(HostKeyStateName(changed->state), "changed");
  EXPECT_EQ(changed->key.fingerprint, Fingerprint("other_host_key"));
  ASSERT_EQ(changed->recorded.size(), 1u);
  EXPECT_EQ(changed->recorded[0].fingerprint, Fingerprint("host_key"));
  EXPECT_EQ(fleet::testing::ReadFile(options.known_hosts_path), before);
  EXPECT_FALSE(SshSession::Connect(options).ok());
}

TEST_F(SshSessionTest, RecordedHostKeysMatchTheHostAsConnectDoes) {
  SshOptions options = Options();
  const std::string key = fleet::testing::ReadFile(dir_.Join("host_key.pub"));
  const std::string stranger = fleet::testing::ReadFile(dir_.Join("stranger_key.pub"));
  dir_.WriteFile("known_hosts",
                 absl::StrCat("# a comment\n", "127.0.0.1 ", stranger,   // port 22: another host
                              "[127.0.0.1]:", port_ + 1, " ", stranger,  // another port
                              "@revoked * ", stranger,                   // a marker, not a key
                              "pve2.example,[127.0.0.1]:", port_, " ", key));
  absl::StatusOr<std::vector<HostKey>> keys = SshSession::RecordedHostKeys(options);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].fingerprint, Fingerprint("host_key"));
  // Hashed host names (ssh-keygen -H) match too.
  absl::StatusOr<fleet::testing::RunResult> hash =
      fleet::testing::Run({kSshKeygen, "-q", "-H", "-f", options.known_hosts_path});
  ASSERT_TRUE(hash.ok() && hash->exited && hash->exit_code == 0);
  ASSERT_THAT(fleet::testing::ReadFile(options.known_hosts_path), HasSubstr("|1|"));
  keys = SshSession::RecordedHostKeys(options);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].fingerprint, Fingerprint("host_key"));
  EXPECT_TRUE(SshSession::Connect(options).ok());
  // No file: no keys.
  options.known_hosts_path = dir_.Join("none/known_hosts");
  keys = SshSession::RecordedHostKeys(options);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(*keys, IsEmpty());
}

// --- A configured host: its options, and fleetd's side of `fleetctl hosts [trust]`. ---

TEST(SshReach, OptionsTakeTheConfigsDefaults) {
  fleet::v1::Host host;
  host.set_name("pve1");
  host.mutable_reach()->set_kind(fleet::v1::Reach::SSH);
  host.mutable_reach()->set_address("10.0.0.5");
  SshOptions options = SshOptionsForHost(host, "/var/lib/fleet");
  EXPECT_EQ(options.host_name, "pve1");
  EXPECT_EQ(options.address, "10.0.0.5");
  EXPECT_EQ(options.port, 22);
  EXPECT_EQ(options.user, "root");
  EXPECT_EQ(options.identity_file, "");
  EXPECT_EQ(options.known_hosts_path, "/var/lib/fleet/known_hosts");
  EXPECT_EQ(options.connect_timeout, absl::Seconds(10));

  fleet::v1::Reach* reach = host.mutable_reach();
  reach->set_port(2222);
  reach->set_user("admin");
  reach->set_identity_file("/etc/fleet/id_ed25519");
  reach->set_known_hosts("/etc/fleet/known_hosts");
  reach->mutable_connect_timeout()->set_nanos(500000000);
  options = SshOptionsForHost(host, "/var/lib/fleet");
  EXPECT_EQ(options.port, 2222);
  EXPECT_EQ(options.user, "admin");
  EXPECT_EQ(options.identity_file, "/etc/fleet/id_ed25519");
  EXPECT_EQ(options.known_hosts_path, "/etc/fleet/known_hosts");
  EXPECT_EQ(options.connect_timeout, absl::Milliseconds(500));

  fleet::v1::Host local;
  local.set_name("local");
  local.mutable_reach()->set_kind(fleet::v1::Reach::LOCAL);
  EXPECT_EQ(SshOptionsForHost(local, "/var/lib/fleet").address, "");
}

TEST(SshReach, RequestsForNoSshHostAreRefusedNamingTheHost) {
  fleet::v1::FleetConfig config;
  fleet::v1::Host* local = config.add_hosts();
  local->set_name("local");
  local->mutable_reach()->set_kind(fleet::v1::Reach::LOCAL);
  fleet::v1::Host* pve1 = config.add_hosts();
  pve1->set_name("pve1");
  pve1->mutable_reach()->set_kind(fleet::v1::Reach::SSH);
  pve1->mutable_reach()->set_address("127.0.0.1");
  pve1->mutable_reach()->set_port(1);  // never connected: every request below is refused first

  const auto trust = [&](const std::string& host, const std::string& fingerprint) {
    fleet::v1::TrustHostRequest request;
    request.set_host(host);
    request.set_fingerprint(fingerprint);
    return TrustConfiguredHost(config, "/nonexistent", request).status();
  };
  absl::Status s = trust("pve9", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "host pve9: not in fleetd's config (its hosts: local, pve1)");
  s = trust("local", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "host local: reached locally (reach kind local), it has no ssh host key to trust");
  s = trust("", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"abc", "MD5:12:34", "SHA256:short",
                          "SHA256:", "SHA256:!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"}) {
    s = trust("pve1", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("is not a SHA256 fingerprint")) << bad;
  }
  s = TrustConfiguredHost(fleet::v1::FleetConfig(), "/nonexistent",
                          [] {
                            fleet::v1::TrustHostRequest request;
                            request.set_host("pve1");
                            return request;
                          }())
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("it has no hosts"));
}

TEST_F(SshSessionTest, TrustingAConfiguredHostTakesTwoSteps) {
  const fleet::v1::FleetConfig config = Config();
  fleet::v1::TrustHostRequest request;
  request.set_host("pve1");

  // Step 1: shown, not recorded.
  absl::StatusOr<fleet::v1::TrustHostResponse> shown =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->host(), "pve1");
  EXPECT_EQ(shown->address(), absl::StrCat("127.0.0.1:", port_));
  EXPECT_EQ(shown->known_hosts(), StateKnownHosts());
  EXPECT_EQ(shown->key_type(), "ssh-ed25519");
  EXPECT_EQ(shown->fingerprint(), Fingerprint("host_key"));
  EXPECT_EQ(shown->key_state(), "new");
  EXPECT_FALSE(shown->recorded());
  EXPECT_THAT(shown->previous_keys(), IsEmpty());
  EXPECT_FALSE(Exists(StateKnownHosts()));

  // A fingerprint the host does not show: refused, nothing written.
  request.set_fingerprint(Fingerprint("other_host_key"));
  absl::StatusOr<fleet::v1::TrustHostResponse> wrong =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(wrong.status().message(),
            absl::StrCat("host pve1: ssh host key is ", Fingerprint("host_key"),
                         ", not the expected ", Fingerprint("other_host_key"), "; not trusted"));
  EXPECT_FALSE(Exists(StateKnownHosts()));

  // Step 2: the fingerprint that was shown.
  request.set_fingerprint(shown->fingerprint());
  absl::StatusOr<fleet::v1::TrustHostResponse> recorded =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_TRUE(recorded->recorded());
  EXPECT_EQ(recorded->key_state(), "new");
  EXPECT_EQ(recorded->fingerprint(), Fingerprint("host_key"));
  EXPECT_THAT(fleet::testing::ReadFile(StateKnownHosts()),
              StartsWith(absl::StrCat("[127.0.0.1]:", port_, " ssh-ed25519 ")));

  // The daemon's connection, with the same options, now succeeds.
  const SshOptions options = SshOptionsForHost(config.hosts(1), StateDir());
  absl::StatusOr<std::unique_ptr<SshSession>> session = SshSession::Connect(options);
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<CommandResult> result = (*session)->Run({"true"}, "", absl::ZeroDuration());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 0);

  // And a scan says so.
  request.clear_fingerprint();
  absl::StatusOr<fleet::v1::TrustHostResponse> again =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->key_state(), "trusted");
  EXPECT_FALSE(again->recorded());
  ASSERT_EQ(again->previous_keys_size(), 1);
  EXPECT_EQ(again->previous_keys(0).fingerprint(), Fingerprint("host_key"));
}

TEST_F(SshSessionTest, AChangedKeyIsShownAndReplacedOnlyOnConfirm) {
  const fleet::v1::FleetConfig config = Config();
  fleet::v1::TrustHostRequest request;
  request.set_host("pve1");
  request.set_fingerprint(Fingerprint("host_key"));
  ASSERT_TRUE(TrustConfiguredHost(config, StateDir(), request).ok());
  UseHostKey("other_host_key");  // pve1 was reinstalled
  const std::string before = fleet::testing::ReadFile(StateKnownHosts());

  request.clear_fingerprint();
  absl::StatusOr<fleet::v1::TrustHostResponse> shown =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->key_state(), "changed");
  EXPECT_FALSE(shown->recorded());
  EXPECT_EQ(shown->fingerprint(), Fingerprint("other_host_key"));
  ASSERT_EQ(shown->previous_keys_size(), 1);
  EXPECT_EQ(shown->previous_keys(0).fingerprint(), Fingerprint("host_key"));
  EXPECT_EQ(shown->previous_keys(0).key_type(), "ssh-ed25519");
  EXPECT_EQ(fleet::testing::ReadFile(StateKnownHosts()), before);

  // The old key's fingerprint is no confirmation of the new key.
  request.set_fingerprint(Fingerprint("host_key"));
  absl::StatusOr<fleet::v1::TrustHostResponse> old =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fleet::testing::ReadFile(StateKnownHosts()), before);

  request.set_fingerprint(shown->fingerprint());
  absl::StatusOr<fleet::v1::TrustHostResponse> replaced =
      TrustConfiguredHost(config, StateDir(), request);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_TRUE(replaced->recorded());
  EXPECT_EQ(replaced->key_state(), "changed");
  ASSERT_EQ(replaced->previous_keys_size(), 1);
  EXPECT_EQ(replaced->previous_keys(0).fingerprint(), Fingerprint("host_key"));
  absl::StatusOr<std::vector<HostKey>> keys =
      SshSession::RecordedHostKeys(SshOptionsForHost(config.hosts(1), StateDir()));
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].fingerprint, Fingerprint("other_host_key"));
  EXPECT_TRUE(SshSession::Connect(SshOptionsForHost(config.hosts(1), StateDir())).ok());
}

TEST_F(SshSessionTest, TrustingAnUnreachableHostIsTheSshError) {
  fleet::v1::FleetConfig config = Config();
  // A bound socket that does not listen: connecting is refused, and the port stays taken.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  config.mutable_hosts(1)->mutable_reach()->set_port(port);
  fleet::v1::TrustHostRequest request;
  request.set_host("pve1");
  absl::StatusOr<fleet::v1::TrustHostResponse> response =
      TrustConfiguredHost(config, StateDir(), request);
  close(fd);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(response.status().message()),
              StartsWith(absl::StrCat("host pve1: ssh connect: 127.0.0.1:", port, ": ")));
}

TEST_F(SshSessionTest, ListingHostsShowsTheirReachAndRecordedKeys) {
  fleet::v1::FleetConfig config = Config();
  fleet::v1::ListHostsResponse listed = ListConfiguredHosts(config, StateDir());
  ASSERT_EQ(listed.hosts_size(), 2);
  const fleet::v1::HostRow& local = listed.hosts(0);
  EXPECT_EQ(local.name(), "local");
  EXPECT_EQ(local.reach(), "local");
  EXPECT_EQ(local.address(), "");
  EXPECT_EQ(local.port(), 0);
  EXPECT_EQ(local.known_hosts(), "");
  EXPECT_EQ(local.containers(), 1);
  const fleet::v1::HostRow& pve1 = listed.hosts(1);
  EXPECT_EQ(pve1.name(), "pve1");
  EXPECT_EQ(pve1.reach(), "ssh");
  EXPECT_EQ(pve1.address(), "127.0.0.1");
  EXPECT_EQ(pve1.port(), port_);
  EXPECT_EQ(pve1.user(), CurrentUser());
  EXPECT_EQ(pve1.identity_file(), dir_.Join("user_key"));
  EXPECT_EQ(pve1.known_hosts(), StateKnownHosts());
  EXPECT_EQ(pve1.containers(), 2);
  EXPECT_THAT(pve1.host_keys(), IsEmpty());
  EXPECT_EQ(pve1.host_keys_error(), "");

  fleet::v1::TrustHostRequest request;
  request.set_host("pve1");
  request.set_fingerprint(Fingerprint("host_key"));
  ASSERT_TRUE(TrustConfiguredHost(config, StateDir(), request).ok());
  listed = ListConfiguredHosts(config, StateDir());
  ASSERT_EQ(listed.hosts(1).host_keys_size(), 1);
  EXPECT_EQ(listed.hosts(1).host_keys(0).fingerprint(), Fingerprint("host_key"));
  EXPECT_EQ(listed.hosts(1).host_keys(0).key_type(), "ssh-ed25519");

  // A known_hosts that cannot be read is said, row by row.
  config.mutable_hosts(1)->mutable_reach()->set_known_hosts(dir_.path());  // a directory
  listed = ListConfiguredHosts(config, StateDir());
  EXPECT_THAT(listed.hosts(1).host_keys(), IsEmpty());
  EXPECT_THAT(listed.hosts(1).host_keys_error(), StartsWith("host pve1: ssh known_hosts "));
}

}  // namespace
}  // namespace fleet::daemon

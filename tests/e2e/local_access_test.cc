// Who may drive fleet-agent and fleetd on this machine (issue 12, defect 5): the real binaries,
// run as root, and clients that drop to `nobody` (a forked child, or setpriv(1) for fleetctl).
// - No listener speaks plaintext TCP by default: the agent serves a unix socket (0600, in its
//   state directory), fleetd its socket (0600), and neither process holds a TCP listening socket.
// - A non-root user is kept out by the file modes, and refused by the peer check (SO_PEERCRED)
//   when a mode lets it through; --allow-uid (agent) and --socket-group (fleetd) admit whom they
//   name.
// Skipped unless run as root.
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using fleet::sim::testing::BackgroundProcess;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr gid_t kFleetGroup = 4242;  // a group no user of the machine is in
constexpr auto kDeadline = std::chrono::seconds(30);
constexpr char kPath[] = "/usr/bin:/bin";

// The inodes of the TCP sockets in LISTEN state of this network namespace.
std::set<std::string> ListeningTcpInodes() {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(testing::ReadFile(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
      if (f.size() > 9 && f[3] == "0A") inodes.insert(f[9]);
    }
  }
  return inodes;
}

// The TCP listening sockets `pid` holds, as "socket:[INODE]" descriptions; empty when none.
std::vector<std::string> TcpListenersOf(pid_t pid) {
  const std::set<std::string> listening = ListeningTcpInodes();
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), link_ec).string();
    if (!absl::StartsWith(target, "socket:[")) continue;
    if (listening.count(target.substr(8, target.size() - 9)) > 0) found.push_back(target);
  }
  return found;
}

enum ChildResult {
  kAnswered = 0,       // the server spoke HTTP/2 back
  kClosed = 1,         // closed without a byte
  kConnectDenied = 2,  // connect(): EACCES, the file mode kept it out
  kOtherFailure = 3,
};

// A child that becomes `uid` (gid nogroup, supplementary `groups`), connects to the unix socket
// `path`, sends the HTTP/2 client preface and an empty SETTINGS frame, and reads: a gRPC server
// that took the connection answers with its SETTINGS; one that refused it closed it.
// Async-signal-safe calls only after fork.
ChildResult SpeakHttp2As(const std::string& path, uid_t uid, const std::vector<gid_t>& groups) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  static const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
  const size_t preface_size = sizeof kPreface - 1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setresgid(kNogroup, kNogroup, kNogroup) ||
        setresuid(uid, uid, uid) != 0) {
      _exit(kOtherFailure);
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) _exit(kOtherFailure);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      _exit(errno == EACCES ? kConnectDenied : kOtherFailure);
    }
    // A refused connection may be closed before this write: EPIPE is a refusal too.
    signal(SIGPIPE, SIG_IGN);
    if (write(fd, kPreface, preface_size) != static_cast<ssize_t>(preface_size)) _exit(kClosed);
    char frame[9];
    ssize_t n;
    while ((n = read(fd, frame, sizeof frame)) < 0 && errno == EINTR) {
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) _exit(kClosed);
    // A SETTINGS frame: type 4.
    _exit(n >= 4 && frame[3] == 4 ? kAnswered : kOtherFailure);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return kOtherFailure;
  return static_cast<ChildResult>(WEXITSTATUS(status));
}

class LocalAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: clients run as nobody";
    // Let nobody walk to the sockets the tests open up (each test says which).
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  }

  // fleet-agent with its defaults but the state dir (and no readiness work to do).
  std::unique_ptr<BackgroundProcess> StartAgent(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {testing::BuildPath("agent/fleet-agent"), "--state-dir",
                                     dir_.Join("agent-state"), "--readiness-interval", "3600"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = BackgroundProcess::Start(argv, {{"PATH", kPath}}, dir_.Join("agent.log"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE((*p)->WaitForLog(
                        [](const std::string& s) {
                          const size_t at = s.find("serving agent.proto on");
                          return at != std::string::npos && s.find('\n', at) != std::string::npos;
                        },
                        kDeadline)
                    .ok())
        << (*p)->Log();
    return *std::move(p);
  }

  std::unique_ptr<BackgroundProcess> StartFleetd(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {testing::BuildPath("daemon/fleetd"), "--state-dir",
                                     dir_.Join("fleetd-state")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = BackgroundProcess::Start(argv, {{"PATH", kPath}}, dir_.Join("fleetd.log"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE((*p)->WaitForLog(
                        [](const std::string& s) {
                          const size_t at = s.find(": serving on ");
                          return at != std::string::npos && s.find('\n', at) != std::string::npos;
                        },
                        kDeadline)
                    .ok())
        << (*p)->Log();
    return *std::move(p);
  }

  // `fleetctl --socket SOCKET status -o json` run by setpriv as nobody with `groups`.
  testing::RunResult FleetctlAs(const std::string& socket, const std::string& groups) {
    std::vector<std::string> argv = {"setpriv", "--reuid=65534", "--regid=65534"};
    if (groups.empty()) {
      argv.push_back("--clear-groups");
    } else {
      argv.push_back("--groups=" + groups);
    }
    for (const std::string& a : {testing::BuildPath("cli/fleetctl"), std::string("--socket"),
                                 socket, std::string("--timeout"), std::string("10s"),
                                 std::string("status"), std::string("-o"), std::string("json")}) {
      argv.push_back(a);
    }
    testing::RunOptions options;
    options.env = std::map<std::string, std::string>{{"PATH", kPath}};
    options.output_path = dir_.Join(absl::StrCat("fleetctl-", ++runs_, ".out"));
    auto r = testing::Run(argv, options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  testing::TempDir dir_;
  int runs_ = 0;
};

TEST_F(LocalAccessTest, TheAgentServesAUnixSocketByDefaultAndNoTcp) {
  auto agent = StartAgent({});
  ASSERT_NE(agent, nullptr);
  const std::string socket = dir_.Join("agent-state/agent.sock");
  EXPECT_THAT(agent->Log(),
              HasSubstr(absl::StrCat("serving agent.proto on unix:", socket, ", incarnation ")));
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0) << agent->Log();
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_THAT(TcpListenersOf(agent->pid()), ::testing::IsEmpty()) << agent->Log();
  // Root speaks to it.
  EXPECT_EQ(SpeakHttp2As(socket, 0, {}), kAnswered);
}

TEST_F(LocalAccessTest, ANonRootUserIsRefusedByTheAgent) {
  auto agent = StartAgent({});
  ASSERT_NE(agent, nullptr);
  const std::string socket = dir_.Join("agent-state/agent.sock");
  ASSERT_EQ(chmod(dir_.Join("agent-state").c_str(), 0755), 0);
  // The mode keeps nobody out...
  EXPECT_EQ(SpeakHttp2As(socket, kNobody, {}), kConnectDenied);
  // ... and where a mode lets it in, the agent closes the connection before gRPC reads it.
  ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
  EXPECT_EQ(SpeakHttp2As(socket, kNobody, {}), kClosed);
  ASSERT_TRUE(agent
                  ->WaitForLog(
                      [](const std::string& s) {
                        return absl::StrContains(s,
                                                 "(uid 65534, gid 65534) refused: only uid 0 "
                                                 "may connect\n");
                      },
                      kDeadline)
                  .ok())
      << agent->Log();
  EXPECT_EQ(SpeakHttp2As(socket, 0, {}), kAnswered);
}

TEST_F(LocalAccessTest, TheAgentAdmitsTheUidsAndGroupsItIsGiven) {
  auto agent = StartAgent({"--allow-uid", "65534", "--allow-gid", "4242"});
  ASSERT_NE(agent, nullptr);
  const std::string socket = dir_.Join("agent-state/agent.sock");
  ASSERT_EQ(chmod(dir_.Join("agent-state").c_str(), 0755), 0);
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kFleetGroup);
  EXPECT_EQ(SpeakHttp2As(socket, kNobody, {kFleetGroup}), kAnswered);
  ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
  EXPECT_EQ(SpeakHttp2As(socket, kNobody, {}), kAnswered);  // --allow-uid
  EXPECT_EQ(SpeakHttp2As(socket, kNobody + 1, {}), kClosed);
}

TEST_F(LocalAccessTest, FleetdServesItsOwnerOnlyAndNoTcp) {
  auto fleetd = StartFleetd({});
  ASSERT_NE(fleetd, nullptr);
  const std::string socket = dir_.Join("fleetd-state/fleetd.sock");
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0) << fleetd->Log();
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_THAT(TcpListenersOf(fleetd->pid()), ::testing::IsEmpty());
  // Even with the modes opened, nobody is refused by the peer check.
  ASSERT_EQ(chmod(dir_.Join("fleetd-state").c_str(), 0755), 0);
  ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
  const testing::RunResult refused = FleetctlAs(socket, "");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_THAT(fleetd->Log(), HasSubstr("(uid 65534, gid 65534) refused"));
}

TEST_F(LocalAccessTest, FleetdsSocketGroupMayUseItAndNoOneElse) {
  const std::string run = dir_.Join("run");
  ASSERT_EQ(mkdir(run.c_str(), 0755), 0);
  const std::string socket = run + "/fleetd.sock";
  auto fleetd = StartFleetd({"--socket", socket, "--socket-group", "4242"});
  ASSERT_NE(fleetd, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0) << fleetd->Log();
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kFleetGroup);
  // A member: fleetd answers (an empty fleet, as JSON).
  const testing::RunResult member = FleetctlAs(socket, "4242");
  EXPECT_EQ(member.exit_code, 0) << member.output << "\n" << fleetd->Log();
  // Not a member: the mode keeps it out; opened, the peer check does.
  const testing::RunResult stranger = FleetctlAs(socket, "");
  EXPECT_NE(stranger.exit_code, 0) << stranger.output;
  ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
  const testing::RunResult still = FleetctlAs(socket, "");
  EXPECT_NE(still.exit_code, 0) << still.output;
  ASSERT_TRUE(fleetd
                  ->WaitForLog(
                      [](const std::string& s) {
                        return absl::StrContains(s, "refused: only uid 0, gid 4242 may connect");
                      },
                      kDeadline)
                  .ok())
      << fleetd->Log();
}

}  // namespace
}  // namespace fleet

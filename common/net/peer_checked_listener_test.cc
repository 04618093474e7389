#include "common/net/peer_checked_listener.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::net {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr gid_t kFleetGroup = 4242;  // a group no user of the machine is in

// What a child that connected as another user saw.
enum ChildResult {
  kAnswered = 0,       // read the byte the test's Accepted callback wrote
  kClosed = 1,         // the connection was closed without a byte
  kConnectDenied = 2,  // connect() failed with EACCES (the file mode kept it out)
  kOtherFailure = 3,
};

// Forks a child that becomes uid `uid` (gid `gid`, supplementary `groups`), connects to `path`
// and reads one byte. Only async-signal-safe calls after fork (the listener's thread runs).
ChildResult ConnectAs(const std::string& path, uid_t uid, gid_t gid,
                      const std::vector<gid_t>& groups) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(kOtherFailure);
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) _exit(kOtherFailure);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      _exit(errno == EACCES ? kConnectDenied : kOtherFailure);
    }
    char byte = 0;
    ssize_t n;
    while ((n = read(fd, &byte, 1)) < 0 && errno == EINTR) {
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) _exit(kClosed);
    _exit(n == 1 && byte == '!' ? kAnswered : kOtherFailure);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return kOtherFailure;
  return static_cast<ChildResult>(WEXITSTATUS(status));
}

// A listener whose Accepted callback answers each connection with one '!' byte and whose Refused
// callback notes the reason.
class PeerCheckedListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the test connects as other users";
  }
  // The listener's thread first: its callbacks write the members below.
  void TearDown() override { listener_.reset(); }

  void Listen(ListenerOptions options) {
    auto l = PeerCheckedListener::Create(std::move(options));
    ASSERT_TRUE(l.ok()) << l.status();
    listener_ = *std::move(l);
    listener_->Start(
        [this](UniqueFd fd) {
          // Noted before the answer: a child that read it finds the connection counted.
          if (!accepted_.HasBeenNotified()) accepted_.Notify();
          if (write(fd.get(), "!", 1) != 1) ADD_FAILURE() << "write: " << std::strerror(errno);
        },
        [this](const absl::Status& why) {
          if (!refused_.HasBeenNotified()) {
            refusal_ = why;
            refused_.Notify();
          }
        });
  }

  // Lets every user reach the socket through the file system: what a wrong mode would do.
  void OpenToEveryone() {
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
    ASSERT_EQ(chmod(socket_path().c_str(), 0666), 0);
  }

  std::string socket_path() const { return dir_.Join("s/agent.sock"); }

  testing::TempDir dir_;
  std::unique_ptr<PeerCheckedListener> listener_;
  absl::Notification accepted_;
  absl::Notification refused_;
  absl::Status refusal_;
};

TEST_F(PeerCheckedListenerTest, TheSocketIsItsOwnersOnlyInADirectoryOfItsOwn) {
  Listen({socket_path(), std::nullopt, {}});
  struct stat st {};
  ASSERT_EQ(stat(socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir_.Join("s").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(ConnectAs(socket_path(), 0, 0, {}), kAnswered);
  EXPECT_TRUE(accepted_.HasBeenNotified());
  listener_.reset();
  EXPECT_NE(stat(socket_path().c_str(), &st), 0) << "the socket file outlived its listener";
}

TEST_F(PeerCheckedListenerTest, ANonRootUserIsKeptOutByTheFileMode) {
  Listen({socket_path(), std::nullopt, {}});
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir_.Join("s").c_str(), 0755), 0);
  EXPECT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {}), kConnectDenied);
}

TEST_F(PeerCheckedListenerTest, ANonRootUserIsRefusedEvenWhenTheModeLetsItIn) {
  ListenerOptions options{socket_path(), std::nullopt, {}};
  options.check_directory = false;
  ASSERT_EQ(mkdir(dir_.Join("s").c_str(), 0755), 0);
  Listen(std::move(options));
  OpenToEveryone();
  EXPECT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {}), kClosed);
  refused_.WaitForNotification();
  EXPECT_THAT(std::string(refusal_.message()), HasSubstr("uid 65534"));
  EXPECT_THAT(std::string(refusal_.message()), HasSubstr("only uid 0 may connect"));
  EXPECT_FALSE(accepted_.HasBeenNotified());
  // Root still gets in.
  EXPECT_EQ(ConnectAs(socket_path(), 0, 0, {}), kAnswered);
}

TEST_F(PeerCheckedListenerTest, AnAllowedUidOrGroupIsAdmitted) {
  ListenerOptions options{socket_path(), kFleetGroup, {{}, {kFleetGroup}}};
  options.check_directory = false;
  ASSERT_EQ(mkdir(dir_.Join("s").c_str(), 0755), 0);
  Listen(std::move(options));
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  struct stat st {};
  ASSERT_EQ(stat(socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kFleetGroup);
  // A member of the group (a supplementary group, as `usermod -aG` makes it) gets in...
  EXPECT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {kFleetGroup}), kAnswered);
  // ... one who is not is kept out by the mode, and by the check when the mode is opened.
  EXPECT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {}), kConnectDenied);
  ASSERT_EQ(chmod(socket_path().c_str(), 0666), 0);
  EXPECT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {}), kClosed);
}

TEST_F(PeerCheckedListenerTest, RefusalsAreToldOneByOneThenOneInAThousand) {
  ListenerOptions options{socket_path(), std::nullopt, {}};
  options.check_directory = false;
  ASSERT_EQ(mkdir(dir_.Join("s").c_str(), 0755), 0);
  auto l = PeerCheckedListener::Create(std::move(options));
  ASSERT_TRUE(l.ok()) << l.status();
  listener_ = *std::move(l);
  absl::Mutex mu;
  std::vector<std::string> told;
  listener_->Start([](UniqueFd) {},
                   [&](const absl::Status& why) {
                     absl::MutexLock lock(&mu);
                     told.emplace_back(why.message());
                   });
  OpenToEveryone();
  for (int i = 0; i < 12; ++i) ASSERT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {}), kClosed);
  // Every refusal was handled (the children saw their connections closed); joined, the count is
  // final.
  listener_.reset();
  absl::MutexLock lock(&mu);
  ASSERT_EQ(told.size(), 10u);
  EXPECT_THAT(told.back(), HasSubstr("(from now on one refusal in 1000 is told)"));
}

TEST_F(PeerCheckedListenerTest, AnAllowedUidIsAdmitted) {
  ListenerOptions options{socket_path(), std::nullopt, {{kNobody}, {}}};
  options.check_directory = false;
  ASSERT_EQ(mkdir(dir_.Join("s").c_str(), 0755), 0);
  Listen(std::move(options));
  OpenToEveryone();
  EXPECT_EQ(ConnectAs(socket_path(), kNobody, kNogroup, {}), kAnswered);
  EXPECT_THAT(listener_->Describe(), HasSubstr("uid 65534"));
}

TEST_F(PeerCheckedListenerTest, ADirectoryOthersMayWriteIsRefused) {
  ASSERT_EQ(mkdir(dir_.Join("s").c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir_.Join("s").c_str(), 01777), 0);
  auto l = PeerCheckedListener::Create({socket_path(), std::nullopt, {}});
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("is writable by others (mode 777)"));
  ASSERT_EQ(chown(dir_.Join("s").c_str(), kNobody, kNogroup), 0);
  ASSERT_EQ(chmod(dir_.Join("s").c_str(), 0700), 0);
  l = PeerCheckedListener::Create({socket_path(), std::nullopt, {}});
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("belongs to uid 65534"));
}

TEST_F(PeerCheckedListenerTest, AStaleSocketIsReplacedALiveOneIsNot) {
  {
    auto first = PeerCheckedListener::Create({socket_path(), std::nullopt, {}});
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = PeerCheckedListener::Create({socket_path(), std::nullopt, {}});
    ASSERT_FALSE(second.ok());
    EXPECT_THAT(std::string(second.status().message()), HasSubstr("another process serves there"));
  }
  // A socket file left by a process that died (bound, never removed).
  {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, socket_path().c_str());
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  Listen({socket_path(), std::nullopt, {}});
  EXPECT_EQ(ConnectAs(socket_path(), 0, 0, {}), kAnswered);
  // A file that is not a socket is never removed.
  listener_.reset();
  dir_.WriteFile("s/agent.sock", "not a socket");
  auto l = PeerCheckedListener::Create({socket_path(), std::nullopt, {}});
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("exists and is not a socket"));
  EXPECT_EQ(testing::ReadFile(socket_path()), "not a socket");
}

TEST(CheckPeer, RootTheOwnerAndTheListedAreAdmitted) {
  const PeerPolicy policy{{1001}, {27}};
  EXPECT_TRUE(CheckPeer(policy, 1000, {1, 0, 0, {}}).ok());
  EXPECT_TRUE(CheckPeer(policy, 1000, {1, 1000, 1000, {}}).ok());
  EXPECT_TRUE(CheckPeer(policy, 1000, {1, 1001, 1001, {}}).ok());
  EXPECT_TRUE(CheckPeer(policy, 1000, {1, 1002, 27, {}}).ok());
  EXPECT_TRUE(CheckPeer(policy, 1000, {1, 1002, 1002, {5, 27}}).ok());
  const absl::Status refused = CheckPeer(policy, 1000, {77, 1002, 1002, {5}});
  EXPECT_TRUE(absl::IsPermissionDenied(refused));
  EXPECT_EQ(refused.message(),
            "peer pid 77 (uid 1002, gid 1002) refused: only uid 0, uid 1000, uid 1001, gid 27 may "
            "connect");
}

}  // namespace
}  // namespace fleet::net

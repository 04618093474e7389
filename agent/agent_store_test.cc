// AgentStore on real SQLite files: the incarnation survives a restart of the agent and a reboot
// after a clean close, and is replaced when the store was open while the machine went down (its
// WAL tail may be lost; the boot id read through a file in the test's directory).
#include "agent/agent_store.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "common/sqlite/power_loss_vfs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

class AgentStoreTest : public ::testing::Test {
 protected:
  AgentStoreTest() { Boot("boot-a"); }

  void Boot(const std::string& boot_id) { dir_.WriteFile("boot_id", boot_id + "\n"); }

  std::unique_ptr<AgentStore> Open() {
    auto store = AgentStore::Open(dir_.Join("state"), 100, dir_.Join("boot_id"));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Appends `n` events; returns the last sequence.
  static uint64_t AppendEvents(AgentStore& store, int n) {
    for (int i = 0; i < n; ++i) {
      fleet::v1::AgentEvent e;
      e.set_attempt_id("a");
      EXPECT_TRUE(store.Append(&e).ok());
    }
    return store.last_sequence();
  }

  // In a child process: opens the store, appends `n` events and ends without closing it (as
  // kill -9 or the machine going down would), agent.db opened with `vfs`. Returns the child's
  // incarnation.
  std::string RunAndCrash(int n, const std::string& vfs = "") {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      auto store = AgentStore::Open(dir_.Join("state"), 100, dir_.Join("boot_id"), vfs);
      if (!store.ok()) _exit(1);
      if (AppendEvents(**store, n) != static_cast<uint64_t>(n)) _exit(2);
      const std::string incarnation = (*store)->incarnation();
      if (write(fds[1], incarnation.data(), incarnation.size()) < 0) _exit(3);
      _exit(0);  // no destructor runs: no clean-close mark
    }
    close(fds[1]);
    std::string out;
    char buf[128];
    for (ssize_t got; (got = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, got);
    close(fds[0]);
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    return out;
  }

  fleet::testing::TempDir dir_;
};

TEST_F(AgentStoreTest, ReopenedUnderAnotherBootAfterAnUncleanCloseStartsANewIncarnation) {
  const std::string before = RunAndCrash(5);
  ASSERT_FALSE(before.empty());
  Boot("boot-b");  // the machine went down with the agent running
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again->incarnation(), before);
  // The new stream starts over: nothing of the old one is replayed under the new name.
  EXPECT_EQ(again->last_sequence(), 0u);
  EXPECT_TRUE(again->EventsAfter(0, 100)->empty());
  fleet::v1::AgentEvent e;
  ASSERT_TRUE(again->Append(&e).ok());
  EXPECT_EQ(e.incarnation(), again->incarnation());
  EXPECT_EQ(e.sequence(), 1u);
}

// A real power cut (the power-loss VFS discards what was not synced): the events' commits
// (synchronous=NORMAL) are lost, the incarnation (synced) is not, and the new boot id makes the
// reopened store start a new stream rather than number new events as the lost ones were.
TEST_F(AgentStoreTest, APowerCutLosesTheUnsyncedTailAndTheNewBootStartsANewIncarnation) {
  const std::string before = RunAndCrash(5, sqlite::kPowerLossVfs);
  ASSERT_FALSE(before.empty());
  // The VFS reached the open: it kept its record beside agent.db.
  ASSERT_TRUE(std::filesystem::exists(dir_.Join("state/agent.db-wal-unsynced")));
  ASSERT_TRUE(sqlite::CutPower(dir_.Join("state")).ok());
  {
    auto db = sqlite::Database::Open(dir_.Join("state/agent.db"));
    ASSERT_TRUE(db.ok()) << db.status();
    auto count = (*db)->Prepare("SELECT count(*) FROM events");
    ASSERT_TRUE(count.ok() && *count->Step());
    EXPECT_EQ(count->ColumnInt(0), 0);
    auto incarnation = (*db)->Prepare("SELECT value FROM meta WHERE key = 'incarnation'");
    ASSERT_TRUE(incarnation.ok() && *incarnation->Step());
    EXPECT_EQ(incarnation->ColumnText(0), before);
  }
  Boot("boot-b");
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again->incarnation(), before);
  EXPECT_EQ(again->last_sequence(), 0u);
}

TEST_F(AgentStoreTest, ReopenedInTheSameBootAfterAnUncleanCloseKeepsItsIncarnation) {
  const std::string before = RunAndCrash(5);  // kill -9: the page cache keeps every commit
  ASSERT_FALSE(before.empty());
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->incarnation(), before);
  EXPECT_EQ(again->last_sequence(), 5u);
  EXPECT_EQ(again->EventsAfter(0, 100)->size(), 5u);
}

TEST_F(AgentStoreTest, ReopenedUnderAnotherBootAfterACleanCloseKeepsItsIncarnation) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  const std::string before = store->incarnation();
  ASSERT_EQ(AppendEvents(*store, 3), 3u);
  store.reset();  // the agent stopped, then the machine rebooted
  Boot("boot-b");
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->incarnation(), before);
  EXPECT_EQ(again->last_sequence(), 3u);
}

TEST_F(AgentStoreTest, TheStateDirAndTheDatabaseAreOwnerOnly) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(AppendEvents(*store, 1), 1u);
  struct stat st = {};
  ASSERT_EQ(stat(dir_.Join("state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat(dir_.Join("state/agent.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir_.Join("state/agent.db-wal").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace fleet::agent

#include "common/sqlite/power_loss_vfs.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/sqlite/database.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::sqlite {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// In a child process: opens `path` through the power-loss VFS, commits `synced` rows under
// synchronous=FULL, then `unsynced` rows under synchronous=OFF (a checkpoint every few pages, so
// that the database file and a restarted WAL are overwritten too), and dies by SIGKILL with the
// connection open. Returns the child's wait status.
int CommitThenDie(const std::string& path, int synced, int unsynced) {
  const pid_t pid = fork();
  if (pid == 0) {
    OpenOptions options;
    options.synchronous = OpenOptions::Synchronous::kFull;
    options.vfs = kPowerLossVfs;
    auto db = Database::Open(path, options);
    if (!db.ok()) _exit(10);
    if (!(*db)
             ->Exec("PRAGMA wal_autocheckpoint=4; "
                    "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)")
             .ok()) {
      _exit(11);
    }
    auto insert = [&](int n) {
      for (int i = 0; i < n; ++i) {
        auto st = (*db)->Prepare("INSERT INTO t (v) VALUES (randomblob(3000))");
        if (!st.ok() || !st->Run().ok()) _exit(12);
      }
    };
    insert(synced);
    if (!(*db)->Exec("PRAGMA synchronous=OFF").ok()) _exit(13);
    insert(unsynced);
    raise(SIGKILL);
    _exit(14);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

int64_t Count(const std::string& path) {
  auto db = Database::Open(path);
  if (!db.ok()) return -1;
  auto st = (*db)->Prepare("SELECT count(*) FROM t");
  if (!st.ok()) return -1;
  auto row = st->Step();
  if (!row.ok() || !*row) return -1;
  return st->ColumnInt(0);
}

std::string IntegrityCheck(const std::string& path) {
  auto db = Database::Open(path);
  if (!db.ok()) return std::string(db.status().message());
  auto st = (*db)->Prepare("PRAGMA integrity_check");
  if (!st.ok()) return std::string(st.status().message());
  auto row = st->Step();
  if (!row.ok() || !*row) return "no answer";
  return st->ColumnText(0);
}

TEST(PowerLossVfs, SyncedCommitsSurviveAPowerCut) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("x.db");
  const int status = CommitThenDie(path, /*synced=*/40, /*unsynced=*/0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ASSERT_TRUE(CutPower(dir.path()).ok());
  EXPECT_EQ(Count(path), 40);
  EXPECT_EQ(IntegrityCheck(path), "ok");
}

TEST(PowerLossVfs, UnsyncedCommitsAreLostToAPowerCutAndTheDatabaseIsIntact) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("x.db");
  const int status = CommitThenDie(path, /*synced=*/10, /*unsynced=*/30);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ASSERT_TRUE(std::filesystem::exists(path + "-wal-unsynced"));
  auto undone = CutPower(dir.path());
  ASSERT_TRUE(undone.ok()) << undone.status();
  EXPECT_THAT(*undone, Contains(HasSubstr("x.db-wal: ")));
  EXPECT_FALSE(std::filesystem::exists(path + "-wal-unsynced"));
  EXPECT_FALSE(std::filesystem::exists(path + "-unsynced"));
  EXPECT_EQ(Count(path), 10);
  EXPECT_EQ(IntegrityCheck(path), "ok");
}

TEST(PowerLossVfs, AProcessKilledAloneLosesNothing) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("x.db");
  const int status = CommitThenDie(path, /*synced=*/10, /*unsynced=*/30);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  // No power cut: the kernel still holds every write.
  EXPECT_EQ(Count(path), 40);
  EXPECT_EQ(IntegrityCheck(path), "ok");
}

TEST(PowerLossVfs, OpenOptionsNameTheVfs) {
  fleet::testing::TempDir dir;
  OpenOptions options;
  options.vfs = kPowerLossVfs;
  auto db = Database::Open(dir.Join("x.db"), options);
  ASSERT_TRUE(db.ok()) << db.status();
  // Only the power-loss VFS keeps a record beside the file.
  EXPECT_TRUE(std::filesystem::exists(dir.Join("x.db-unsynced")));
  options.vfs = "no-such-vfs";
  auto other = Database::Open(dir.Join("y.db"), options);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument) << other.status();
}

}  // namespace
}  // namespace fleet::sqlite

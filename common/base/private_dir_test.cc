#include "common/base/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace fleet {
namespace {

// One temp dir per test (fleet::testing is not a dependency of fleet::base).
class PrivateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "private_dir_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static int ModeOf(const std::string& path) {
    struct stat st = {};
    return stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
  }

  std::string root_;
};

TEST_F(PrivateDirTest, ANewDirectoryIsOwnerOnlyWithItsParents) {
  const std::string path = root_ + "/a/b/state";
  auto changed = MakePrivateDir(path);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, -1);
  EXPECT_EQ(ModeOf(path), 0700);
}

TEST_F(PrivateDirTest, AnOpenDirectoryIsNarrowedAndItsOldModeReported) {
  const std::string path = root_ + "/state";
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  ASSERT_EQ(chmod(path.c_str(), 0755), 0);
  auto changed = MakePrivateDir(path);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, 0755);
  EXPECT_EQ(ModeOf(path), 0700);
  auto again = MakePrivateDir(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, -1);
}

TEST_F(PrivateDirTest, AFileInTheWayIsRefused) {
  const std::string path = root_ + "/file";
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  auto changed = MakePrivateDir(path);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(changed.status().message().find(path), absl::string_view::npos);
}

}  // namespace
}  // namespace fleet

#include "common/diagnosis/diagnosis_class.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace fleet::diagnosis {
namespace {

TEST(DiagnosisClassTable, NamesAreUniqueAndEachIsFoundByItsName) {
  std::set<std::string_view> seen;
  for (const DiagnosisClassInfo& c : AllDiagnosisClasses()) {
    SCOPED_TRACE(std::string(c.name));
    EXPECT_TRUE(seen.insert(c.name).second);
    ASSERT_EQ(FindDiagnosisClass(c.name), &c);
    EXPECT_FALSE(c.summary.empty());
  }
  EXPECT_EQ(FindDiagnosisClass("not_a_class"), nullptr);
}

TEST(DiagnosisClassTable, TheNamedConstantsAreRowsOfTheTable) {
  for (std::string_view name : {classes::kMissingSharedLibrary,
                                classes::kNvccNotFound,
                                classes::kNinjaNotFound,
                                classes::kCudaHeaderMismatch,
                                classes::kPtxVersionUnsupported,
                                classes::kLinkError,
                                classes::kNvccTooOld,
                                classes::kUnsupportedGpuArch,
                                classes::kJitOomKilled,
                                classes::kJitBuildFailed,
                                classes::kStaleJitCache,
                                classes::kAttentionBackendUnsupported,
                                classes::kCudaGraphCaptureFailed,
                                classes::kGpuDriverUnavailable,
                                classes::kAbiMismatch,
                                classes::kCudaOutOfMemory,
                                classes::kPortInUse,
                                classes::kModelNotFound,
                                classes::kNcclError,
                                classes::kRuntimeWatchdog,
                                classes::kStartupStalled,
                                classes::kStartupDeadlineExceeded,
                                classes::kChildProcessFailed,
                                classes::kUnknown,
                                classes::kNone}) {
    EXPECT_NE(FindDiagnosisClass(name), nullptr) << name;
  }
  EXPECT_EQ(AllDiagnosisClasses().size(), 25u) << "a new class needs its constant too";
}

TEST(DiagnosisClassTable, ARelaunchMayHelpOnlyWhenNothingInTheContainerIsKnownToBeWrong) {
  // No failure at all.
  EXPECT_TRUE(RetryMayHelp(""));
  EXPECT_TRUE(RetryMayHelp(classes::kNone));
  // Something around the container, a stall, or no known cause.
  for (std::string_view c :
       {classes::kCudaOutOfMemory, classes::kPortInUse, classes::kNcclError,
        classes::kRuntimeWatchdog, classes::kStartupStalled, classes::kStartupDeadlineExceeded,
        classes::kUnknown, classes::kChildProcessFailed}) {
    EXPECT_TRUE(RetryMayHelp(c)) << c;
  }
  // Something in the container is wrong: the same start fails the same way.
  for (std::string_view c :
       {classes::kMissingSharedLibrary, classes::kPtxVersionUnsupported, classes::kModelNotFound,
        classes::kAbiMismatch, classes::kJitBuildFailed, classes::kGpuDriverUnavailable}) {
    EXPECT_FALSE(RetryMayHelp(c)) << c;
  }
  // A name the table does not know is not retried blindly.
  EXPECT_FALSE(RetryMayHelp("made_up_class"));
}

}  // namespace
}  // namespace fleet::diagnosis

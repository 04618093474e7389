// LogFollower against real files and real inotify: the test is the writer (a server appending to
// its log, logrotate, copytruncate, rm) and calls Poll() itself, after checking that the write left
// an event on fd(). No sleeps: inotify queues events inside the writing syscall.
#include "agent/log_follower.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/signature_matcher.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::agent {
namespace {

using Reason = LogFollower::RestartReason;

// What the sink saw, cut at each restart: segment 0 is the first file, each later one starts with
// an OnRestart.
struct Segment {
  std::optional<Reason> reason;
  int64_t lost_bytes = 0;
  std::string data;
};

class RecordingSink : public LogFollower::Sink {
 public:
  void OnData(std::string_view bytes) override {
    segments_.back().data.append(bytes);
    max_chunk_ = std::max(max_chunk_, bytes.size());
  }
  void OnRestart(Reason reason, int64_t lost_bytes) override {
    segments_.push_back(Segment{reason, lost_bytes, ""});
  }

  const std::vector<Segment>& segments() const { return segments_; }
  // Everything delivered, for tests without restarts.
  const std::string& data() const { return segments_.front().data; }
  size_t max_chunk() const { return max_chunk_; }

 private:
  std::vector<Segment> segments_{Segment{}};
  size_t max_chunk_ = 0;
};

// A server's log descriptor: opened once for appending, like stdout redirected with `>>`, so it
// keeps writing to the same file across a rename or an unlink.
class Writer {
 public:
  explicit Writer(const std::string& path)
      : fd_(open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) {
    EXPECT_GE(fd_, 0) << path;
  }
  ~Writer() {
    if (fd_ >= 0) close(fd_);
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void Write(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = write(fd_, bytes.data(), bytes.size());
      ASSERT_GT(n, 0);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
};

void Append(const std::string& path, std::string_view bytes) { Writer(path).Write(bytes); }

// Whether an inotify event is pending: what the owner's poll() on fd() would wake up for.
bool Readable(const LogFollower& follower) {
  pollfd p{follower.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

std::unique_ptr<LogFollower> MustCreate(const std::string& path, RecordingSink* sink,
                                        int64_t offset = 0, LogFollower::Options options = {}) {
  auto follower = LogFollower::Create(path, offset, sink, options);
  EXPECT_TRUE(follower.ok()) << follower.status();
  return follower.ok() ? *std::move(follower) : nullptr;
}

TEST(LogFollower, DeliversAppendsInPiecesWithPartialLinesExactlyOnce) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  EXPECT_FALSE(Readable(*follower));

  std::string written;
  for (std::string_view piece : {"Loading weights", " 10%", "\nLoading weights 20%\nCap", "",
                                 "ture cuda graph begin.\n", "tail without newline"}) {
    writer.Write(piece);
    written += piece;
    if (!piece.empty()) {
      EXPECT_TRUE(Readable(*follower)) << piece;
    }
    ASSERT_TRUE(follower->Poll().ok());
    EXPECT_FALSE(Readable(*follower));
    EXPECT_EQ(sink.data(), written);
  }
  EXPECT_EQ(follower->offset(), static_cast<int64_t>(written.size()));
  EXPECT_EQ(follower->delivered(), static_cast<int64_t>(written.size()));
  EXPECT_EQ(sink.segments().size(), 1u);
}

TEST(LogFollower, PollIsIdempotentWhenNothingChanged) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Append(path, "one\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "one\n");
  EXPECT_FALSE(Readable(*follower));
  EXPECT_EQ(follower->path(), path);
}

TEST(LogFollower, StartsAtTheGivenOffset) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Append(path, "already read\nnot yet");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink, /*offset=*/13);
  ASSERT_NE(follower, nullptr);
  EXPECT_EQ(follower->offset(), 13);
  ASSERT_TRUE(follower->Poll().ok());
  Append(path, " read\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "not yet read\n");
  EXPECT_EQ(follower->offset(), 26);
  EXPECT_EQ(follower->delivered(), 13);
}

TEST(LogFollower, RestartsWhenTheOffsetIsPastTheEnd) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Append(path, "short\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink, /*offset=*/1000);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[1].reason, Reason::kTruncated);
  EXPECT_EQ(sink.segments()[1].lost_bytes, 0);
  EXPECT_EQ(sink.segments()[1].data, "short\n");
}

TEST(LogFollower, RestartsWhenTheFileWasRewrittenBeforeTheFirstPoll) {
  // The agent restarts from a saved offset, but the log was truncated and has grown past that
  // offset again meanwhile: its size alone would look like an append.
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Append(path, "old line one\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink, /*offset=*/13);
  ASSERT_NE(follower, nullptr);
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  Append(path, "new attempt, longer line\n");
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[0].data, "");
  EXPECT_EQ(sink.segments()[1].reason, Reason::kTruncated);
  EXPECT_EQ(sink.segments()[1].data, "new attempt, longer line\n");
}

TEST(LogFollower, FollowsAFileCreatedAfterCreate) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink, /*offset=*/5);  // no file: the offset does not apply
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(follower->offset(), 0);

  Writer writer(path);
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  writer.Write("server started\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "server started\n");
  EXPECT_EQ(sink.segments().size(), 1u);
}

TEST(LogFollower, FollowsAFileWhoseDirectoriesAppearLater) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("workspace/sglang_logs/sglang_gpu0.log");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());

  // Each directory is announced by the watch on its parent, which then moves down to it.
  ASSERT_EQ(mkdir(dir.Join("workspace").c_str(), 0755), 0);
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(mkdir(dir.Join("workspace/sglang_logs").c_str(), 0755), 0);
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_FALSE(Readable(*follower));

  Append(path, "[gpu0] starting\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "[gpu0] starting\n");
}

TEST(LogFollower, FollowsAFileWhoseDirectoriesAppearBetweenPolls) {
  // mkdir -p and the first write all happen before the follower looks: one Poll finds the file.
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("a/b/c/server.log");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  dir.WriteFile("a/b/c/server.log", "first\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "first\n");
  Append(path, "second\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "first\nsecond\n");
}

TEST(LogFollower, ReadsTheRestOfARotatedFileThenTheNewOne) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  auto old_writer = std::make_unique<Writer>(path);
  old_writer->Write("old 1\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());

  ASSERT_EQ(rename(path.c_str(), dir.Join("server.log.1").c_str()), 0);
  EXPECT_TRUE(Readable(*follower));
  // The server has not reopened its log yet: what it writes still reaches the renamed file.
  old_writer->Write("old 2, after the ");
  ASSERT_TRUE(follower->Poll().ok());
  old_writer->Write("rename\n");
  EXPECT_TRUE(Readable(*follower));
  Writer new_writer(path);
  new_writer.Write("new 1\n");
  old_writer->Write("old 3, before the reopen\n");
  old_writer.reset();
  ASSERT_TRUE(follower->Poll().ok());

  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[0].data, "old 1\nold 2, after the rename\nold 3, before the reopen\n");
  EXPECT_EQ(sink.segments()[1].reason, Reason::kRotated);
  EXPECT_EQ(sink.segments()[1].lost_bytes, 0);
  EXPECT_EQ(sink.segments()[1].data, "new 1\n");
  EXPECT_EQ(follower->offset(), 6);
  EXPECT_FALSE(Readable(*follower));  // the old file's dropped watch is not a wake-up

  new_writer.Write("new 2\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.segments()[1].data, "new 1\nnew 2\n");
}

TEST(LogFollower, FollowsAFileRenamedIntoPlace) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Append(path, "first file\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());
  Append(dir.Join("server.log.tmp"), "second file\n");
  ASSERT_EQ(rename(dir.Join("server.log.tmp").c_str(), path.c_str()), 0);
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(sink.segments().size(), 2u);
  // The first file was replaced and unlinked by the rename: nothing links it any more.
  EXPECT_EQ(sink.segments()[1].reason, Reason::kRecreated);
  EXPECT_EQ(sink.segments()[1].data, "second file\n");
}

TEST(LogFollower, FollowsManyRotationsInARow) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  auto writer = std::make_unique<Writer>(path);
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  constexpr int kRotations = 50;
  std::vector<std::string> expected(1);
  for (int i = 0; i < kRotations; ++i) {
    const std::string line = absl::StrCat("generation ", i, " line\n");
    writer->Write(line.substr(0, 7));
    ASSERT_TRUE(follower->Poll().ok());
    ASSERT_EQ(rename(path.c_str(), dir.Join(absl::StrCat("server.log.", i)).c_str()), 0);
    writer->Write(line.substr(7));  // after the rename, before the reopen
    expected.back() += line;
    writer = std::make_unique<Writer>(path);
    expected.emplace_back();
    EXPECT_TRUE(Readable(*follower));
    ASSERT_TRUE(follower->Poll().ok());
  }
  writer->Write("last\n");
  expected.back() += "last\n";
  ASSERT_TRUE(follower->Poll().ok());

  ASSERT_EQ(sink.segments().size(), expected.size());
  int64_t total = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(sink.segments()[i].data, expected[i]) << i;
    if (i > 0) {
      EXPECT_EQ(sink.segments()[i].reason, Reason::kRotated) << i;
    }
    total += static_cast<int64_t>(expected[i].size());
  }
  EXPECT_EQ(follower->delivered(), total);
}

TEST(LogFollower, RestartsAfterTruncationBelowTheOffset) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  writer.Write("a long line before the truncation\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  EXPECT_TRUE(Readable(*follower));
  writer.Write("short\n");  // O_APPEND: at the new end
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[1].reason, Reason::kTruncated);
  EXPECT_EQ(sink.segments()[1].lost_bytes, 0);
  EXPECT_EQ(sink.segments()[1].data, "short\n");
  EXPECT_EQ(follower->offset(), 6);
}

TEST(LogFollower, DetectsCopytruncateEvenWhenTheFileRegrewPastTheOffset) {
  // logrotate's copytruncate: copy, then truncate in place while the server keeps appending. The
  // server wrote more than had been read before the follower looked again.
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  writer.Write("line 1\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());

  writer.Write("line 2, never read\n");
  {
    std::ifstream in(path, std::ios::binary);
    std::ofstream out(dir.Join("server.log.1"), std::ios::binary);
    out << in.rdbuf();
  }
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  writer.Write("line 3 after the truncation\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());

  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[0].data, "line 1\n");
  EXPECT_EQ(sink.segments()[1].reason, Reason::kTruncated);
  // "line 2" was written and truncated away between two Polls: neither the bytes nor their count
  // exist anywhere the follower can read, so they are not in lost_bytes (see the next test).
  EXPECT_EQ(sink.segments()[1].lost_bytes, 0);
  EXPECT_EQ(sink.segments()[1].data, "line 3 after the truncation\n");
}

// Truncates the file while the follower is in the middle of reading it.
class TruncatingSink : public RecordingSink {
 public:
  explicit TruncatingSink(std::string path) : path_(std::move(path)) {}
  void OnData(std::string_view bytes) override {
    RecordingSink::OnData(bytes);
    if (!truncated_) {
      truncated_ = true;
      ASSERT_EQ(truncate(path_.c_str(), 0), 0);
      Append(path_, "after\n");
    }
  }

 private:
  const std::string path_;
  bool truncated_ = false;
};

TEST(LogFollower, ReportsBytesSeenButTruncatedAwayAsLost) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Append(path, std::string(100, 'x'));
  TruncatingSink sink(path);
  auto follower = MustCreate(path, &sink, 0, LogFollower::Options{.chunk_bytes = 40});
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[0].data, std::string(40, 'x'));
  EXPECT_EQ(sink.segments()[1].reason, Reason::kTruncated);
  EXPECT_EQ(sink.segments()[1].lost_bytes, 60);
  EXPECT_EQ(sink.segments()[1].data, "after\n");
}

TEST(LogFollower, FinishesADeletedFileThenFollowsTheRecreatedOne) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  auto old_writer = std::make_unique<Writer>(path);
  old_writer->Write("before rm\n");
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());

  old_writer->Write("written just before rm\n");
  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  // The server still holds the deleted file and writes to it: it is still followed.
  old_writer->Write("written to the deleted file\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "before rm\nwritten just before rm\nwritten to the deleted file\n");
  old_writer.reset();

  Append(path, "new server\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(sink.segments().size(), 2u);
  EXPECT_EQ(sink.segments()[1].reason, Reason::kRecreated);
  EXPECT_EQ(sink.segments()[1].lost_bytes, 0);
  EXPECT_EQ(sink.segments()[1].data, "new server\n");
  EXPECT_FALSE(Readable(*follower));
}

// Checks a long stream against a deterministic pattern without keeping it.
class PatternSink : public LogFollower::Sink {
 public:
  static char At(int64_t i) { return static_cast<char>('a' + i % 26); }
  void OnData(std::string_view bytes) override {
    max_chunk_ = std::max(max_chunk_, bytes.size());
    for (char c : bytes) {
      if (c != At(received_++)) ++mismatches_;
    }
  }
  void OnRestart(Reason, int64_t) override { ++restarts_; }

  int64_t received_ = 0;
  int64_t mismatches_ = 0;
  int restarts_ = 0;
  size_t max_chunk_ = 0;
};

TEST(LogFollower, DeliversAHundredMegabyteLineInBoundedChunks) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  PatternSink sink;
  LogFollower::Options options;
  auto created = LogFollower::Create(path, 0, &sink, options);
  ASSERT_TRUE(created.ok()) << created.status();
  auto follower = *std::move(created);

  constexpr int64_t kTotal = int64_t{100} << 20;
  constexpr int64_t kPiece = int64_t{1} << 20;
  std::string piece(kPiece, '\0');
  for (int64_t written = 0; written < kTotal; written += kPiece) {
    for (int64_t i = 0; i < kPiece; ++i) piece[i] = PatternSink::At(written + i);
    writer.Write(piece);
    // Poll now and then, so both a backlog and a trickle are read.
    if ((written / kPiece) % 10 == 3) {
      EXPECT_TRUE(Readable(*follower));
      ASSERT_TRUE(follower->Poll().ok());
    }
  }
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.received_, kTotal);
  EXPECT_EQ(sink.mismatches_, 0);
  EXPECT_EQ(sink.restarts_, 0);
  EXPECT_LE(sink.max_chunk_, options.chunk_bytes);
  EXPECT_GT(sink.max_chunk_, 0u);
  EXPECT_EQ(follower->delivered(), kTotal);
}

TEST(LogFollower, DeliversBinaryJunkWithNulsUnchanged) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  RecordingSink sink;
  auto follower = MustCreate(path, &sink, 0, LogFollower::Options{.chunk_bytes = 100});
  ASSERT_NE(follower, nullptr);
  std::mt19937 rng(42);
  std::string written;
  for (int round = 0; round < 200; ++round) {
    std::string junk(std::uniform_int_distribution<int>(1, 700)(rng), '\0');
    for (char& c : junk) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    if (round % 3 == 0) junk[0] = '\0';
    writer.Write(junk);
    written += junk;
    if (round % 4 != 0) {
      ASSERT_TRUE(follower->Poll().ok());
    }
  }
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_NE(written.find('\0'), std::string::npos);
  EXPECT_EQ(sink.data(), written);
  EXPECT_LE(sink.max_chunk(), 100u);
}

class ClassifyingSink : public LogFollower::Sink {
 public:
  ClassifyingSink()
      : classifier_(&diagnosis::SignatureMatcher::Builtin(), {.offline = false}, &listener_) {}
  void OnData(std::string_view bytes) override { classifier_.AddBytes(bytes); }

  const diagnosis::Classifier& classifier() const { return classifier_; }
  int64_t root_cause_line() const { return listener_.root_cause_line; }

 private:
  struct Listener : diagnosis::ClassifierListener {
    void OnRootCause(int64_t line) override { root_cause_line = line; }
    int64_t root_cause_line = 0;
  };
  Listener listener_;
  diagnosis::Classifier classifier_;
};

TEST(LogFollower, FeedsAClassifierThatFindsARootCauseSplitAcrossAppends) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  ClassifyingSink sink;
  auto created = LogFollower::Create(path, 0, &sink, {});
  ASSERT_TRUE(created.ok()) << created.status();
  auto follower = *std::move(created);

  writer.Write(
      "[2026-11-29 10:00:01 TP0] Loading JIT ops: batch_decode_bf16\n"
      "FAILED: [code=255] decode.cuda.o\n"
      "ptxas fatal   : Unsupported .ver");
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.root_cause_line(), 0);  // half a line is not a cause yet
  writer.Write("sion 9.2; current version is '9.0'\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());

  EXPECT_EQ(sink.root_cause_line(), 3);
  const diagnosis::Diagnosis d = sink.classifier().Snapshot();
  EXPECT_EQ(d.diagnosis_class, "ptx_version_unsupported");
  EXPECT_EQ(d.root_cause_line, 3);
}

TEST(LogFollower, DeliversEverythingAfterAnEventQueueOverflow) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  Writer writer(path);
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);

  // A rename in the directory queues IN_MOVED_FROM and IN_MOVED_TO with a fresh cookie: events
  // that are never coalesced, so more of them than the queue holds overflow it. The log is
  // appended to in between.
  int64_t max_events = 16384;
  if (std::FILE* f = std::fopen("/proc/sys/fs/inotify/max_queued_events", "r")) {
    long long v = 0;
    if (std::fscanf(f, "%lld", &v) == 1 && v > 0) max_events = v;
    std::fclose(f);
  }
  const int64_t renames = std::min<int64_t>(max_events / 2 + 16, 1 << 20);
  const std::string names[2] = {dir.Join("sibling.a"), dir.Join("sibling.b")};
  Append(names[0], "");
  std::string expected;
  for (int64_t i = 0; i < renames; ++i) {
    ASSERT_EQ(rename(names[i % 2].c_str(), names[(i + 1) % 2].c_str()), 0);
    if (i % 1000 == 0) {
      const std::string line = absl::StrCat("progress ", i, "\n");
      writer.Write(line);
      expected += line;
    }
  }
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), expected);
  EXPECT_EQ(sink.segments().size(), 1u);
  EXPECT_FALSE(Readable(*follower));

  // Still awake to what comes next.
  writer.Write("after the overflow\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), expected + "after the overflow\n");
}

TEST(LogFollower, RejectsInvalidArguments) {
  fleet::testing::TempDir dir;
  RecordingSink sink;
  EXPECT_EQ(LogFollower::Create("", 0, &sink, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogFollower::Create(dir.Join("x.log"), 0, nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogFollower::Create(dir.Join("x.log"), -1, &sink, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogFollower::Create(dir.Join("x.log"), 0, &sink, {.chunk_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LogFollower, IgnoresADirectoryAtThePath) {
  fleet::testing::TempDir dir;
  const std::string path = dir.Join("server.log");
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  RecordingSink sink;
  auto follower = MustCreate(path, &sink);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(follower->Poll().ok());
  ASSERT_EQ(rmdir(path.c_str()), 0);
  Append(path, "a file now\n");
  EXPECT_TRUE(Readable(*follower));
  ASSERT_TRUE(follower->Poll().ok());
  EXPECT_EQ(sink.data(), "a file now\n");
}

}  // namespace
}  // namespace fleet::agent

#include "agent/log_follower.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"
#include "common/base/status_macros.h"
#include "common/base/unique_fd.h"

namespace fleet::agent {
namespace {

// The directory that holds (or will hold) the file: a new name there, the file renamed away or
// deleted, or the directory itself replaced. IN_MODIFY is left out on purpose: writes to sibling
// logs in the same directory must not wake this follower.
constexpr uint32_t kDirMask = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF |
                              IN_MOVE_SELF | IN_ONLYDIR;
// The file being read: appends and truncation (IN_MODIFY), unlink (IN_ATTRIB: nlink changed).
constexpr uint32_t kFileMask = IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;

// The last bytes read are kept to notice a file truncated and then re-grown past the offset before
// the next Poll (copytruncate while the agent was busy or down): its size alone looks like growth.
constexpr size_t kFingerprintBytes = 128;

// Bounds the re-arming of the directory watch within one Poll when directories keep changing.
constexpr int kMaxDirRearms = 64;

// The directory part of `path` ("." for a bare name, "/" for a top-level entry); a fixed point at
// "." and "/", which ends the walk up to the nearest existing ancestor.
std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  const size_t end = path.find_last_not_of('/', slash);
  if (end == std::string::npos) return "/";
  return path.substr(0, end + 1);
}

}  // namespace

class LogFollower::Impl {
 public:
  Impl(std::string path, Sink* sink, Options options, UniqueFd inotify_fd)
      : path_(std::move(path)),
        sink_(sink),
        inotify_fd_(std::move(inotify_fd)),
        chunk_bytes_(options.chunk_bytes) {}

  absl::Status Init(int64_t offset);
  absl::Status Poll();

  int fd() const { return inotify_fd_.get(); }
  const std::string& path() const { return path_; }
  int64_t offset() const { return file_.fd.valid() ? file_.offset : 0; }
  int64_t delivered() const { return delivered_; }

 private:
  // One open file at the path (or once at the path: renamed away or deleted, still being read).
  struct File {
    UniqueFd fd;
    int wd = -1;  // its inotify watch; -1 when adding it failed (retried on every Poll)
    dev_t dev = 0;
    ino_t ino = 0;
    int64_t offset = 0;
    // The largest size fstat showed since reading (re)started: bytes seen but not read yet are
    // what a truncation is known to have lost.
    int64_t seen_size = 0;
    // Up to kFingerprintBytes last bytes before `offset`.
    std::string tail;
  };

  absl::Status DrainEvents();
  // True when the watch moved.
  absl::StatusOr<bool> ArmDirWatch();
  absl::Status WatchFile(File& file);
  void CloseFile(File& file);
  // Restarts at 0 when the file shrank below the offset or its bytes before the offset changed.
  absl::Status CheckTruncation();
  // Reads up to the size fstat shows now. True when the file ended sooner (it shrank meanwhile).
  absl::StatusOr<bool> ReadAvailable();
  // Reads the current file to its end, re-checking truncation until it holds still.
  absl::Status ReadToEnd();
  // Adopts the file the path names now when it is another one than the current file; the current
  // one is read to its end first. True when it switched.
  absl::StatusOr<bool> FollowPath();
  void Deliver(std::string_view bytes);
  std::string What(std::string_view operation) const {
    return absl::StrCat("log ", path_, ": ", std::string(operation));
  }

  // Constant after construction.
  const std::string path_;
  Sink* const sink_;
  const UniqueFd inotify_fd_;
  // The most one read takes. The buffer is allocated per ReadAvailable, only as large as what is
  // there to read: an agent follows many logs that are quiet most of the time, and a buffer held
  // per follower would stay resident for each of them.
  const size_t chunk_bytes_;

  File file_;
  int64_t delivered_ = 0;
  // The directory watched for the file's name: the file's directory, or while it does not exist,
  // its nearest existing ancestor.
  int dir_wd_ = -1;
  std::string watched_dir_;
  dev_t watched_dir_dev_ = 0;
  ino_t watched_dir_ino_ = 0;
};

absl::Status LogFollower::Impl::Init(int64_t offset) {
  FLEET_RETURN_IF_ERROR(ArmDirWatch().status());
  FLEET_ASSIGN_OR_RETURN(const bool found, FollowPath());
  // The offset belongs to the file there now; a file that appears later is a new one, read from 0.
  if (!found || offset == 0) return absl::OkStatus();
  file_.offset = offset;
  struct stat st;
  if (fstat(file_.fd.get(), &st) != 0) return ErrnoToStatus(errno, What("fstat"));
  file_.seen_size = st.st_size;
  // With the bytes before the offset as the fingerprint, a file rewritten while nobody followed it
  // (the agent restarting from a saved offset) is noticed as a truncation at the first Poll. When
  // the offset is past the end, the first Poll reports the truncation by size.
  if (offset <= st.st_size) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(offset, kFingerprintBytes));
    std::array<char, kFingerprintBytes> bytes;
    const ssize_t n =
        pread(file_.fd.get(), bytes.data(), want, offset - static_cast<int64_t>(want));
    if (n < 0) return ErrnoToStatus(errno, What("read"));
    file_.tail.assign(bytes.data(), static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status LogFollower::Impl::Poll() {
  // Events are drained before anything is looked at, so a change made after the drain leaves a new
  // event behind (the next wake-up) even if this round misses it. A round that moved a watch
  // queued an IN_IGNORED for the old one; another round drains it (and re-checks everything, since
  // that drain may have taken real events too), so an idle follower is not woken for nothing.
  while (true) {
    FLEET_RETURN_IF_ERROR(DrainEvents());
    FLEET_ASSIGN_OR_RETURN(const bool rearmed, ArmDirWatch());
    if (file_.fd.valid() && file_.wd < 0) FLEET_RETURN_IF_ERROR(WatchFile(file_));
    // Each switch adopts a file that appeared at the path; it ends when the path holds still.
    bool switched = false;
    while (true) {
      if (file_.fd.valid()) FLEET_RETURN_IF_ERROR(ReadToEnd());
      FLEET_ASSIGN_OR_RETURN(const bool next, FollowPath());
      if (!next) break;
      switched = true;
    }
    if (!rearmed && !switched) return absl::OkStatus();
  }
}

absl::Status LogFollower::Impl::DrainEvents() {
  // What the events say is not used: every Poll re-checks the path and the file, which covers a
  // coalesced or lost event and an IN_Q_OVERFLOW alike.
  alignas(struct inotify_event) char events[4096];
  while (true) {
    const ssize_t n = read(inotify_fd_.get(), events, sizeof(events));
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return absl::OkStatus();
    return ErrnoToStatus(n < 0 ? errno : EIO, What("read inotify events"));
  }
}

absl::StatusOr<bool> LogFollower::Impl::ArmDirWatch() {
  // After arming, the walk is repeated: a directory created between the stat and the watch raised
  // no event here, so the watch moves down to it now rather than waiting for a wake-up that never
  // comes.
  bool moved = false;
  for (int attempt = 0; attempt < kMaxDirRearms; ++attempt) {
    std::string dir = Parent(path_);
    struct stat st;
    while (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      if (errno != ENOENT && errno != ENOTDIR) {
        return ErrnoToStatus(errno, absl::StrCat("log ", path_, ": stat ", dir));
      }
      std::string up = Parent(dir);
      if (up == dir) {
        return absl::NotFoundError(
            absl::StrCat("log ", path_, ": no existing directory to watch above it"));
      }
      dir = std::move(up);
    }
    if (dir_wd_ >= 0 && dir == watched_dir_ && st.st_dev == watched_dir_dev_ &&
        st.st_ino == watched_dir_ino_) {
      return moved;
    }
    const int wd = inotify_add_watch(inotify_fd_.get(), dir.c_str(), kDirMask);
    if (wd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;  // it went away since the stat
      return ErrnoToStatus(errno, absl::StrCat("log ", path_, ": watch ", dir));
    }
    // The same inode under another name keeps its watch descriptor; only a different one is
    // dropped. EINVAL (the kernel dropped it with a deleted directory) is expected and harmless.
    if (dir_wd_ >= 0 && dir_wd_ != wd) inotify_rm_watch(inotify_fd_.get(), dir_wd_);
    dir_wd_ = wd;
    moved = true;
    watched_dir_ = std::move(dir);
    watched_dir_dev_ = st.st_dev;
    watched_dir_ino_ = st.st_ino;
  }
  return absl::UnavailableError(
      absl::StrCat("log ", path_, ": its directories keep changing; watch not settled"));
}

absl::Status LogFollower::Impl::WatchFile(File& file) {
  // Watching through the descriptor pins the watch to the inode that was opened even if the path
  // has moved on since; the path is the fallback where /proc is not mounted.
  const std::string by_fd = absl::StrCat("/proc/self/fd/", file.fd.get());
  int wd = inotify_add_watch(inotify_fd_.get(), by_fd.c_str(), kFileMask);
  if (wd < 0) wd = inotify_add_watch(inotify_fd_.get(), path_.c_str(), kFileMask);
  if (wd < 0) return ErrnoToStatus(errno, What("watch"));
  file.wd = wd;
  return absl::OkStatus();
}

void LogFollower::Impl::CloseFile(File& file) {
  // The watch goes before the descriptor: closing the last reference to a deleted file makes the
  // kernel drop the watch itself, and its number could then be reused.
  if (file.wd >= 0) inotify_rm_watch(inotify_fd_.get(), file.wd);
  file = File();
}

absl::Status LogFollower::Impl::CheckTruncation() {
  struct stat st;
  if (fstat(file_.fd.get(), &st) != 0) return ErrnoToStatus(errno, What("fstat"));
  bool truncated = st.st_size < file_.offset;
  if (!truncated && !file_.tail.empty()) {
    std::array<char, kFingerprintBytes> bytes;
    const size_t want = file_.tail.size();
    ssize_t n;
    do {
      n = pread(file_.fd.get(), bytes.data(), want, file_.offset - static_cast<int64_t>(want));
    } while (n < 0 && errno == EINTR);
    if (n < 0) return ErrnoToStatus(errno, What("read"));
    // A short read means the file shrank since the fstat: a truncation too.
    truncated =
        static_cast<size_t>(n) != want || std::memcmp(bytes.data(), file_.tail.data(), want);
  }
  if (!truncated) return absl::OkStatus();
  const int64_t lost = std::max<int64_t>(0, file_.seen_size - file_.offset);
  file_.offset = 0;
  file_.seen_size = st.st_size;
  file_.tail.clear();
  sink_->OnRestart(RestartReason::kTruncated, lost);
  return absl::OkStatus();
}

absl::StatusOr<bool> LogFollower::Impl::ReadAvailable() {
  struct stat st;
  if (fstat(file_.fd.get(), &st) != 0) return ErrnoToStatus(errno, What("fstat"));
  file_.seen_size = std::max<int64_t>(file_.seen_size, st.st_size);
  // Reading stops at the size seen now rather than at EOF, so a writer faster than the sink cannot
  // keep one Poll going forever; what it writes later left an event behind.
  const int64_t end = st.st_size;
  if (file_.offset >= end) return false;
  const size_t size = static_cast<size_t>(
      std::min<int64_t>(end - file_.offset, static_cast<int64_t>(chunk_bytes_)));
  const std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(size);
  while (file_.offset < end) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(end - file_.offset, size));
    const ssize_t n = pread(file_.fd.get(), buffer.get(), want, file_.offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, What("read"));
    }
    if (n == 0) return true;
    Deliver(std::string_view(buffer.get(), static_cast<size_t>(n)));
  }
  return false;
}

void LogFollower::Impl::Deliver(std::string_view bytes) {
  file_.offset += static_cast<int64_t>(bytes.size());
  delivered_ += static_cast<int64_t>(bytes.size());
  if (bytes.size() >= kFingerprintBytes) {
    file_.tail.assign(bytes.substr(bytes.size() - kFingerprintBytes));
  } else {
    file_.tail.append(bytes);
    if (file_.tail.size() > kFingerprintBytes) {
      file_.tail.erase(0, file_.tail.size() - kFingerprintBytes);
    }
  }
  // Last: the sink may look at offset() and delivered().
  sink_->OnData(bytes);
}

absl::Status LogFollower::Impl::ReadToEnd() {
  while (true) {
    FLEET_RETURN_IF_ERROR(CheckTruncation());
    FLEET_ASSIGN_OR_RETURN(const bool shrank, ReadAvailable());
    if (!shrank) return absl::OkStatus();
  }
}

absl::StatusOr<bool> LogFollower::Impl::FollowPath() {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    // Nothing at the path (deleted, or renamed away and not re-created yet): the current file, if
    // any, is kept and followed, since its writer may still be appending to it.
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return ErrnoToStatus(errno, What("stat"));
  }
  if (!S_ISREG(st.st_mode)) return false;
  if (file_.fd.valid() && st.st_dev == file_.dev && st.st_ino == file_.ino) return false;

  // O_NONBLOCK: a FIFO swapped in at the path must not block the open; it is refused below.
  File next;
  next.fd = UniqueFd(open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!next.fd.valid()) {
    if (errno == ENOENT || errno == ENOTDIR) return false;  // gone again: its event is pending
    return ErrnoToStatus(errno, What("open"));
  }
  // What was opened is the truth; the path may have changed again since the stat.
  if (fstat(next.fd.get(), &st) != 0) return ErrnoToStatus(errno, What("fstat"));
  if (!S_ISREG(st.st_mode)) return false;
  if (file_.fd.valid() && st.st_dev == file_.dev && st.st_ino == file_.ino) return false;
  next.dev = st.st_dev;
  next.ino = st.st_ino;

  if (!file_.fd.valid()) {
    file_ = std::move(next);
    FLEET_RETURN_IF_ERROR(WatchFile(file_));
    return true;
  }
  // The writer may have appended to the old file since it was last read: its end comes first.
  FLEET_RETURN_IF_ERROR(ReadToEnd());
  struct stat old;
  if (fstat(file_.fd.get(), &old) != 0) return ErrnoToStatus(errno, What("fstat"));
  // Renamed away (still linked somewhere) is a rotation; unlinked is a deletion. A rotated file
  // deleted before this Poll looks like the latter; either way every byte of it was read.
  const RestartReason reason =
      old.st_nlink == 0 ? RestartReason::kRecreated : RestartReason::kRotated;
  CloseFile(file_);
  file_ = std::move(next);
  sink_->OnRestart(reason, 0);
  // A failed watch is retried at the next Poll; the file is followed meanwhile.
  FLEET_RETURN_IF_ERROR(WatchFile(file_));
  return true;
}

absl::StatusOr<std::unique_ptr<LogFollower>> LogFollower::Create(std::string path, int64_t offset,
                                                                 Sink* sink, Options options) {
  if (path.empty()) return absl::InvalidArgumentError("log follower: empty path");
  if (sink == nullptr) return absl::InvalidArgumentError(absl::StrCat("log ", path, ": no sink"));
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("log ", path, ": negative offset ", offset));
  }
  if (options.chunk_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("log ", path, ": chunk_bytes is 0"));
  }
  UniqueFd inotify_fd(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify_fd.valid()) return ErrnoToStatus(errno, absl::StrCat("log ", path, ": inotify"));
  auto impl = std::make_unique<Impl>(std::move(path), sink, options, std::move(inotify_fd));
  FLEET_RETURN_IF_ERROR(impl->Init(offset));
  return std::unique_ptr<LogFollower>(new LogFollower(std::move(impl)));
}

LogFollower::LogFollower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LogFollower::~LogFollower() = default;

int LogFollower::fd() const { return impl_->fd(); }
absl::Status LogFollower::Poll() { return impl_->Poll(); }
const std::string& LogFollower::path() const { return impl_->path(); }
int64_t LogFollower::offset() const { return impl_->offset(); }
int64_t LogFollower::delivered() const { return impl_->delivered(); }

}  // namespace fleet::agent

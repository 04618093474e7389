#include "common/net/peer_checked_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/errno_status.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace fleet::net {
namespace {

// A peer with more supplementary groups than this is read up to this many (NGROUPS_MAX is 65536;
// every group counted is one the policy may admit, so a cut list only ever refuses).
constexpr size_t kMaxPeerGroups = 4096;

// Refused connections are told (logged) one by one up to here, then one in kRefusalsTellEvery.
constexpr int64_t kRefusalsTold = 10;
constexpr int64_t kRefusalsTellEvery = 1000;

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket '", path,
                                                   "': the path must have 1..",
                                                   sizeof(address.sun_path) - 1, " characters"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// True when something accepts connections on `path`.
bool Answers(const sockaddr_un& address) {
  UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return false;
  return connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
}

absl::Status PrepareDirectory(const std::string& path, bool check) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || !check) {
      return ErrnoToStatus(errno, absl::StrCat("unix socket directory ", dir, ": stat"));
    }
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("unix socket directory ", dir, ": mkdir"));
    }
    if (stat(dir.c_str(), &st) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("unix socket directory ", dir, ": stat"));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("unix socket directory ", dir, ": not a directory"));
  }
  if (!check) return absl::OkStatus();
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unix socket directory ", dir, " belongs to uid ", st.st_uid,
        ": it must be root's or this process's own (whoever owns it can replace the socket)"));
  }
  // Sticky /tmp-like directories are refused too: the socket's name could be taken first.
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unix socket directory ", dir, " is writable by others (mode ",
        absl::StrCat(absl::Dec((st.st_mode >> 6) & 7), absl::Dec((st.st_mode >> 3) & 7),
                     absl::Dec(st.st_mode & 7)),
        "): they could replace the socket; use a directory only its owner may write (0700)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return ErrnoToStatus(errno, "unix socket peer: SO_PEERCRED");
  }
  PeerCredentials peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      break;
    }
    if (errno == ERANGE && glen / sizeof(gid_t) > groups.size() && groups.size() < kMaxPeerGroups) {
      groups.resize(std::min<size_t>(glen / sizeof(gid_t), kMaxPeerGroups));
      continue;
    }
    // An older kernel, or more groups than we read: only the primary group counts.
    groups.clear();
    break;
  }
  peer.groups = std::move(groups);
  return peer;
}

absl::Status CheckPeer(const PeerPolicy& policy, uid_t self, const PeerCredentials& peer) {
  auto has = [](const auto& list, auto value) {
    return std::find(list.begin(), list.end(), value) != list.end();
  };
  if (peer.uid == 0 || peer.uid == self || has(policy.uids, peer.uid)) return absl::OkStatus();
  if (has(policy.gids, peer.gid)) return absl::OkStatus();
  for (gid_t g : peer.groups) {
    if (has(policy.gids, g)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat("peer pid ", peer.pid, " (uid ", peer.uid,
                                                  ", gid ", peer.gid, ") refused: only ",
                                                  DescribePolicy(policy, self), " may connect"));
}

std::string DescribePolicy(const PeerPolicy& policy, uid_t self) {
  std::vector<std::string> who = {"uid 0"};
  if (self != 0) who.push_back(absl::StrCat("uid ", self));
  for (uid_t u : policy.uids) {
    if (u != 0 && u != self) who.push_back(absl::StrCat("uid ", u));
  }
  for (gid_t g : policy.gids) who.push_back(absl::StrCat("gid ", g));
  return absl::StrJoin(who, ", ");
}

absl::StatusOr<std::unique_ptr<PeerCheckedListener>> PeerCheckedListener::Create(
    ListenerOptions options) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(options.path);
  if (!address.ok()) return address.status();
  if (absl::Status s = PrepareDirectory(options.path, options.check_directory); !s.ok()) return s;
  struct stat st {};
  if (lstat(options.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("unix socket ", options.path, ": exists and is not a socket"));
    }
    if (Answers(*address)) {
      return absl::FailedPreconditionError(
          absl::StrCat("unix socket ", options.path, ": another process serves there"));
    }
    unlink(options.path.c_str());  // a stale socket of a previous run
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid())
    return ErrnoToStatus(errno, absl::StrCat("unix socket ", options.path, ": socket"));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("unix socket ", options.path, ": bind"));
  }
  // The mode and group before listen(): until then no one can connect.
  const mode_t mode = options.group ? 0660 : 0600;
  if (options.group && chown(options.path.c_str(), static_cast<uid_t>(-1), *options.group) != 0) {
    const int err = errno;
    unlink(options.path.c_str());
    return ErrnoToStatus(
        err, absl::StrCat("unix socket ", options.path, ": chown to gid ", *options.group));
  }
  if (chmod(options.path.c_str(), mode) != 0) {
    const int err = errno;
    unlink(options.path.c_str());
    return ErrnoToStatus(err, absl::StrCat("unix socket ", options.path, ": chmod"));
  }
  if (listen(fd.get(), SOMAXCONN) != 0) {
    const int err = errno;
    unlink(options.path.c_str());
    return ErrnoToStatus(err, absl::StrCat("unix socket ", options.path, ": listen"));
  }
  UniqueFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) {
    const int err = errno;
    unlink(options.path.c_str());
    return ErrnoToStatus(err, "unix socket listener: eventfd");
  }
  return std::unique_ptr<PeerCheckedListener>(
      new PeerCheckedListener(std::move(options), std::move(fd), std::move(stop)));
}

PeerCheckedListener::PeerCheckedListener(ListenerOptions options, UniqueFd socket, UniqueFd stop)
    : options_(std::move(options)),
      self_(geteuid()),
      socket_(std::move(socket)),
      stop_(std::move(stop)) {}

PeerCheckedListener::~PeerCheckedListener() {
  const uint64_t one = 1;
  if (write(stop_.get(), &one, sizeof one) != sizeof one) {
    // An eventfd write fails only on overflow, which one write cannot reach.
  }
  if (thread_.joinable()) thread_.join();
  socket_.Reset();
  // Removed unless another process serves there now (a later run that replaced a stale socket).
  // (fstat of a socket gives the socket's inode, not the file's: the path is checked by asking.)
  struct stat st {};
  absl::StatusOr<sockaddr_un> address = UnixAddress(options_.path);
  if (lstat(options_.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && address.ok() &&
      !Answers(*address)) {
    unlink(options_.path.c_str());
  }
}

std::string PeerCheckedListener::Describe() const { return DescribePolicy(options_.policy, self_); }

void PeerCheckedListener::Start(Accepted accepted, Refused refused) {
  thread_ = std::thread([this, accepted = std::move(accepted), refused = std::move(refused)] {
    Loop(accepted, refused);
  });
}

void PeerCheckedListener::Loop(const Accepted& accepted, const Refused& refused) {
  int64_t refusals = 0;
  for (;;) {
    pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd conn(accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn.valid()) {
      // EAGAIN (a peer gave up), ECONNABORTED, or out of descriptors: the next one may work.
      if (errno == EMFILE || errno == ENFILE) {
        pollfd wait_stop{stop_.get(), POLLIN, 0};
        if (poll(&wait_stop, 1, 100) > 0) return;
      }
      continue;
    }
    absl::StatusOr<PeerCredentials> peer = ReadPeerCredentials(conn.get());
    absl::Status verdict = peer.ok() ? CheckPeer(options_.policy, self_, *peer) : peer.status();
    if (!verdict.ok()) {
      conn.Reset();
      // Bounded: whoever is refused may try again at once, as often as it likes.
      ++refusals;
      if (refused && (refusals <= kRefusalsTold || refusals % kRefusalsTellEvery == 0)) {
        refused(absl::Status(
            verdict.code(),
            absl::StrCat(
                "unix socket ", options_.path, ": ", verdict.message(),
                refusals == kRefusalsTold
                    ? absl::StrCat(" (from now on one refusal in ", kRefusalsTellEvery, " is told)")
                : refusals > kRefusalsTold ? absl::StrCat(" (", refusals, " refused so far)")
                                           : "")));
      }
      continue;
    }
    accepted(std::move(conn));
  }
}

}  // namespace fleet::net

// PeerCheckedListener: a unix socket that only chosen local users may talk through. It binds the
// socket (mode 0600, or 0660 with a group), and accepts connections itself on a thread of its own:
// each one's peer credentials (SO_PEERCRED, SO_PEERGROUPS) are checked against a PeerPolicy
// before the connection is handed on (to gRPC: grpc::AddInsecureChannelFromFd); a refused one is
// closed at once, before it can send a byte that is read. The file mode keeps strangers from
// connecting at all; the check holds even when the mode or the directory is wrong.
//
// Used by fleet-agent (agent.proto launches processes as root) and fleetd (fleet.proto tells every
// agent what to run). Thread-safe: Start once; the destructor stops the thread, closes the socket
// and removes its file.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/unique_fd.h"

namespace fleet::net {

// Who a peer is, as the kernel saw it at connect().
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS)
};

// Who may connect: root, the listener's own effective uid, and these uids, and any peer whose
// primary or supplementary group is one of `gids`.
struct PeerPolicy {
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
};

// The credentials of the peer of a connected unix socket.
absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd);

// Ok when `policy` admits `peer` (with `self` the listener's effective uid); else
// PermissionDenied saying who the peer is and who may connect.
absl::Status CheckPeer(const PeerPolicy& policy, uid_t self, const PeerCredentials& peer);

// "uid 0, uid 1000, gid 27": who a policy admits (root and `self` included), for logs.
std::string DescribePolicy(const PeerPolicy& policy, uid_t self);

struct ListenerOptions {
  std::string path;  // the socket's file (no "unix:" prefix)
  // With a group: the socket is chown'ed to it and made 0660 (the group may connect); without,
  // 0600 (its owner only).
  std::optional<gid_t> group;
  PeerPolicy policy;
  // The socket's directory is created (0700) when missing, and refused when anyone but its owner
  // (root or this process's user) may write to it: they could replace the socket with their own.
  // Off for a directory whose group members must reach the socket: 0750 or 0710 is fine either way.
  bool check_directory = true;
};

class PeerCheckedListener {
 public:
  // Called on the listener's thread with each admitted connection (non-blocking, close-on-exec).
  using Accepted = std::function<void(UniqueFd)>;
  // Called on the listener's thread for a refused one (already closed), with the reason: for
  // each of the first 10, then for one in 1000 (a refused user may retry without end; the log
  // stays bounded).
  using Refused = std::function<void(const absl::Status&)>;

  // Binds and listens. A stale socket file of a previous run is replaced; a socket something
  // still answers on is not (FailedPrecondition: another process serves there), nor is a file
  // that is not a socket.
  static absl::StatusOr<std::unique_ptr<PeerCheckedListener>> Create(ListenerOptions options);
  ~PeerCheckedListener();
  PeerCheckedListener(const PeerCheckedListener&) = delete;
  PeerCheckedListener& operator=(const PeerCheckedListener&) = delete;

  // Starts accepting. Call once.
  void Start(Accepted accepted, Refused refused);

  const std::string& path() const { return options_.path; }
  // Who the policy admits, for the serving line of a log.
  std::string Describe() const;

 private:
  PeerCheckedListener(ListenerOptions options, UniqueFd socket, UniqueFd stop);
  void Loop(const Accepted& accepted, const Refused& refused);

  const ListenerOptions options_;
  const uid_t self_;
  UniqueFd socket_;
  UniqueFd stop_;  // an eventfd: written once by the destructor
  std::thread thread_;
};

}  // namespace fleet::net

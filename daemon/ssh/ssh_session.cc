#include "daemon/ssh/ssh_session.h"

#include <fcntl.h>
#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/clock.h"
#include "common/base/errno_status.h"
#include "common/base/status_macros.h"
#include "common/base/string_view.h"

namespace fleet::daemon {
namespace {

// How long after our deadline the host's `timeout` kills a command (SshOptions::remote_deadline):
// long enough that ours fires first, and the result is DeadlineExceeded rather than an exit.
constexpr absl::Duration kRemoteDeadlineGrace = absl::Seconds(1);

// The start of every message about this host: "host pve1: ".
std::string HostPrefix(const SshOptions& options) {
  return absl::StrCat("host ", options.host_name, ": ");
}

std::string LibsshError(ssh_session session) {
  const char* error = ssh_get_error(session);
  return (error != nullptr && *error != '\0') ? std::string(error) : "unknown libssh error";
}

// A command for error messages: long ones are cut.
std::string CommandSummary(const std::string& command) {
  constexpr size_t kMax = 120;
  return command.size() <= kMax ? command : absl::StrCat(command.substr(0, kMax), "...");
}

absl::Status SetOption(ssh_session session, const SshOptions& options, ssh_options_e option,
                       const void* value, std::string_view what) {
  if (ssh_options_set(session, option, value) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(HostPrefix(options), "ssh option ",
                                                   std::string(what), ": ", LibsshError(session)));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const SshOptions& options) {
  const std::string prefix = HostPrefix(options);
  if (options.host_name.empty()) return absl::InvalidArgumentError("ssh: host name is empty");
  if (options.address.empty()) return absl::InvalidArgumentError(prefix + "ssh: address is empty");
  // libssh would read "user@host" as a user name.
  if (options.address.find('@') != std::string::npos) {
    return absl::InvalidArgumentError(prefix + "ssh: address holds '@' (set the user apart)");
  }
  if (options.port < 1 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "ssh: port ", options.port));
  }
  if (options.user.empty()) return absl::InvalidArgumentError(prefix + "ssh: user is empty");
  if (options.known_hosts_path.empty()) {
    return absl::InvalidArgumentError(prefix + "ssh: known_hosts path is empty");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(prefix + "ssh: connect timeout must be positive");
  }
  return absl::OkStatus();
}

// TCP keepalive: libssh has no client keepalive of its own, and a command waiting for output
// from a host that lost power would otherwise wait for its full timeout.
absl::Status EnableKeepalive(ssh_session session, const SshOptions& options) {
  const int seconds =
      static_cast<int>(std::max<int64_t>(1, absl::ToInt64Seconds(options.keepalive_interval)));
  const int on = 1;
  const int probes = 3;
  const socket_t fd = ssh_get_fd(session);
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &seconds, sizeof seconds) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &seconds, sizeof seconds) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) != 0) {
    return ErrnoToStatus(errno, HostPrefix(options) + "ssh: keepalive");
  }
  return absl::OkStatus();
}

// The key's type and its "SHA256:<base64>" fingerprint, as `ssh-keygen -l` prints it.
absl::StatusOr<HostKey> DescribeKey(ssh_key key, const SshOptions& options) {
  HostKey described;
  const char* type = ssh_key_type_to_char(ssh_key_type(key));
  described.type = type != nullptr ? type : "unknown";
  unsigned char* hash = nullptr;
  size_t hash_len = 0;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hash_len) != 0) {
    return absl::InternalError(HostPrefix(options) + "ssh host key: cannot hash it");
  }
  char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hash_len);
  ssh_clean_pubkey_hash(&hash);
  if (text == nullptr) {
    return absl::InternalError(HostPrefix(options) + "ssh host key: cannot format fingerprint");
  }
  described.fingerprint = text;
  ssh_string_free_char(text);
  return described;
}

// The name known_hosts files the host under, as libssh looks it up: the address in lower case,
// as "[address]:port" when the port is not 22.
std::string KnownHostsName(const SshOptions& options) {
  const std::string host = absl::AsciiStrToLower(options.address);
  return options.port == 22 ? host : absl::StrCat("[", host, "]:", options.port);
}

// Rewrites the known_hosts file with `entry` ("HOSTS KEYTYPE KEY") as the only key of its host:
// the host is taken out of every plain entry that names it (a line left with no host goes), so
// a replaced key is no longer trusted. Hashed (`|1|`) and marker (`@`) lines are kept as they
// are. Written to a temporary file and renamed, so a reader never sees half a file.
absl::Status ReplaceKnownHostsEntry(const SshOptions& options, const std::string& entry) {
  const std::string prefix = HostPrefix(options);
  const std::string& path = options.known_hosts_path;
  const std::string host = entry.substr(0, entry.find(' '));
  std::string kept;
  std::ifstream in(path);
  if (!in.is_open() && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh known_hosts ", path, ": open"));
  }
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find_first_of(" \t");
    if (line.empty() || line[0] == '#' || line[0] == '|' || line[0] == '@' ||
        space == std::string::npos) {
      absl::StrAppend(&kept, line, "\n");
      continue;
    }
    std::vector<std::string> patterns = absl::StrSplit(line.substr(0, space), ',');
    const size_t before = patterns.size();
    patterns.erase(std::remove(patterns.begin(), patterns.end(), host), patterns.end());
    if (patterns.size() == before) {
      absl::StrAppend(&kept, line, "\n");
    } else if (!patterns.empty()) {
      absl::StrAppend(&kept, absl::StrJoin(patterns, ","), line.substr(space), "\n");
    }
  }
  absl::StrAppend(&kept, entry, "\n");

  std::string temp = path + ".XXXXXX";
  const int fd = mkstemp(temp.data());
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh known_hosts ", temp));
  absl::Cleanup remove_temp = [&temp] { unlink(temp.c_str()); };
  size_t written = 0;
  while (written < kept.size()) {
    const ssize_t n = write(fd, kept.data() + written, kept.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoToStatus(err, absl::StrCat(prefix, "ssh known_hosts ", temp, ": write"));
    }
    written += static_cast<size_t>(n);
  }
  // Public keys: readable by all like ~/.ssh/known_hosts; the fsync makes the rename durable.
  if (fchmod(fd, 0644) != 0 || fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoToStatus(err, absl::StrCat(prefix, "ssh known_hosts ", temp));
  }
  if (close(fd) != 0) return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh known_hosts ", temp));
  if (rename(temp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh known_hosts ", path, ": rename"));
  }
  std::move(remove_temp).Cancel();
  return absl::OkStatus();
}

// Output of one stream, bounded: the last `limit` bytes are kept.
class TailBuffer {
 public:
  explicit TailBuffer(size_t limit) : limit_(limit) {}

  void Append(const char* data, size_t size) {
    total_ += size;
    data_.append(data, size);
    // Trimming only past twice the limit keeps appending amortised O(size).
    if (data_.size() > 2 * limit_) Trim();
  }
  // The kept bytes; `*truncated` says whether earlier ones were dropped.
  std::string Take(bool* truncated) {
    Trim();
    *truncated = total_ > data_.size();
    return std::move(data_);
  }

 private:
  void Trim() {
    if (data_.size() > limit_) data_.erase(0, data_.size() - limit_);
  }

  const size_t limit_;
  uint64_t total_ = 0;
  std::string data_;
};

// One `exec` channel and what arrives on it. libssh keeps pointers to callbacks_ and to this
// object (the callbacks' user data) while the channel lives, so it is neither copied nor moved,
// and the destructor removes the callbacks before freeing the channel: a close that arrives
// after a timeout is then dropped by libssh instead of reaching a dead object.
class ExecChannel {
 public:
  ExecChannel(ssh_session session, size_t output_limit)
      : channel_(ssh_channel_new(session)), out_(output_limit), err_(output_limit) {
    callbacks_.userdata = this;
    callbacks_.channel_data_function = &ExecChannel::OnData;
    callbacks_.channel_close_function = &ExecChannel::OnClose;
    callbacks_.channel_exit_status_function = &ExecChannel::OnExitStatus;
    callbacks_.channel_exit_signal_function = &ExecChannel::OnExitSignal;
    ssh_callbacks_init(&callbacks_);
    if (channel_ != nullptr) ssh_set_channel_callbacks(channel_, &callbacks_);
  }
  ~ExecChannel() {
    if (channel_ == nullptr) return;
    ssh_remove_channel_callbacks(channel_, &callbacks_);
    ssh_channel_free(channel_);
  }
  ExecChannel(const ExecChannel&) = delete;
  ExecChannel& operator=(const ExecChannel&) = delete;

  ssh_channel get() const { return channel_; }
  bool closed() const { return closed_ || ssh_channel_is_closed(channel_) != 0; }
  bool exited() const { return exit_status_ >= 0 || !exit_signal_.empty(); }

  CommandResult TakeResult() {
    CommandResult result;
    result.exit_status = exit_status_;
    result.exit_signal = exit_signal_;
    result.out = out_.Take(&result.out_truncated);
    result.err = err_.Take(&result.err_truncated);
    return result;
  }

 private:
  static int OnData(ssh_session, ssh_channel, void* data, uint32_t len, int is_stderr, void* self) {
    auto* channel = static_cast<ExecChannel*>(self);
    (is_stderr != 0 ? channel->err_ : channel->out_).Append(static_cast<const char*>(data), len);
    return static_cast<int>(len);
  }
  static void OnClose(ssh_session, ssh_channel, void* self) {
    static_cast<ExecChannel*>(self)->closed_ = true;
  }
  static void OnExitStatus(ssh_session, ssh_channel, int status, void* self) {
    static_cast<ExecChannel*>(self)->exit_status_ = status;
  }
  static void OnExitSignal(ssh_session, ssh_channel, const char* signal, int, const char*,
                           const char*, void* self) {
    static_cast<ExecChannel*>(self)->exit_signal_ = signal != nullptr ? signal : "UNKNOWN";
  }

  ssh_channel channel_;
  ssh_channel_callbacks_struct callbacks_ = {};
  TailBuffer out_;
  TailBuffer err_;
  bool closed_ = false;
  int exit_status_ = -1;
  std::string exit_signal_;
};

}  // namespace

std::string_view HostKeyStateName(HostKeyScan::State state) {
  switch (state) {
    case HostKeyScan::State::kNew:
      return "new";
    case HostKeyScan::State::kTrusted:
      return "trusted";
    case HostKeyScan::State::kChanged:
      return "changed";
  }
  return "new";
}

void SshSession::SessionCloser::operator()(ssh_session_struct* session) const {
  if (ssh_is_connected(session) != 0) ssh_disconnect(session);
  ssh_free(session);
}

SshSession::SshSession(SshOptions options, SessionPtr session, std::string fingerprint)
    : options_(std::move(options)),
      fingerprint_(std::move(fingerprint)),
      session_(std::move(session)) {}

SshSession::~SshSession() = default;

absl::StatusOr<SshSession::SessionPtr> SshSession::OpenTransport(const SshOptions& options) {
  FLEET_RETURN_IF_ERROR(ValidateOptions(options));
  const std::string prefix = HostPrefix(options);
  SessionPtr session(ssh_new());
  if (session == nullptr) return absl::ResourceExhaustedError(prefix + "ssh: cannot allocate");
  ssh_session s = session.get();

  // Only what the options say: not ~/.ssh/config, /etc/ssh/ssh_config, nor the system's
  // known_hosts (the daemon's trust is its own file).
  const bool process_config = false;
  const int verbosity = SSH_LOG_NOLOG;
  const unsigned int port = static_cast<unsigned int>(options.port);
  const int64_t timeout_usec = absl::ToInt64Microseconds(options.connect_timeout);
  const long timeout_s = static_cast<long>(timeout_usec / 1000000);
  const long timeout_us = static_cast<long>(timeout_usec % 1000000);
  FLEET_RETURN_IF_ERROR(
      SetOption(s, options, SSH_OPTIONS_PROCESS_CONFIG, &process_config, "process_config"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_LOG_VERBOSITY, &verbosity, "log"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_HOST, options.address.c_str(), "host"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_PORT, &port, "port"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_USER, options.user.c_str(), "user"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_KNOWNHOSTS,
                                  options.known_hosts_path.c_str(), "known_hosts"));
  FLEET_RETURN_IF_ERROR(
      SetOption(s, options, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null", "global known_hosts"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_TIMEOUT, &timeout_s, "timeout"));
  FLEET_RETURN_IF_ERROR(SetOption(s, options, SSH_OPTIONS_TIMEOUT_USEC, &timeout_us, "timeout"));

  if (ssh_connect(s) != SSH_OK) {
    return absl::UnavailableError(absl::StrCat(prefix, "ssh connect: ", options.address, ":",
                                               options.port, ": ", LibsshError(s)));
  }
  if (options.keepalive_interval > absl::ZeroDuration()) {
    FLEET_RETURN_IF_ERROR(EnableKeepalive(s, options));
  }
  return session;
}

absl::StatusOr<HostKeyScan> SshSession::ReadHostKey(ssh_session_struct* session,
                                                    const SshOptions& options) {
  const std::string prefix = HostPrefix(options);
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(session, &key) != SSH_OK) {
    return absl::UnavailableError(absl::StrCat(prefix, "ssh host key: ", LibsshError(session)));
  }
  absl::Cleanup free_key = [key] { ssh_key_free(key); };
  HostKeyScan scan;
  FLEET_ASSIGN_OR_RETURN(scan.key, DescribeKey(key, options));
  FLEET_ASSIGN_OR_RETURN(scan.recorded, RecordedHostKeys(options));
  // libssh's verdict decides, so that a scan says exactly what Connect will do.
  switch (ssh_session_is_known_server(session)) {
    case SSH_KNOWN_HOSTS_OK:
      scan.state = HostKeyScan::State::kTrusted;
      return scan;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      scan.state = HostKeyScan::State::kChanged;
      return scan;
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN:
      scan.state = HostKeyScan::State::kNew;
      return scan;
    case SSH_KNOWN_HOSTS_ERROR:
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      prefix, "ssh known_hosts ", options.known_hosts_path, ": ", LibsshError(session)));
}

absl::Status SshSession::VerifyHostKey(const HostKeyScan& scan, const SshOptions& options) {
  const std::string prefix = HostPrefix(options);
  const std::string trust = absl::StrCat("fleetctl hosts trust ", options.host_name);
  switch (scan.state) {
    case HostKeyScan::State::kTrusted:
      return absl::OkStatus();
    case HostKeyScan::State::kChanged:
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "ssh host key changed (now ", scan.key.fingerprint, "); if ",
                       options.host_name, " was reinstalled, check the key and run ", trust,
                       ", otherwise someone may be intercepting the connection"));
    case HostKeyScan::State::kNew:
      break;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(prefix, "ssh host key unknown (", scan.key.fingerprint, "); run ", trust));
}

absl::Status SshSession::Authenticate(ssh_session_struct* session, const SshOptions& options) {
  const std::string prefix = HostPrefix(options);
  int rc = SSH_AUTH_ERROR;
  if (!options.identity_file.empty()) {
    const std::string& path = options.identity_file;
    if (access(path.c_str(), R_OK) != 0) {
      return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh identity ", path));
    }
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "ssh identity ", path,
          ": not a private key libssh can read (ed25519 or RSA, without a passphrase)"));
    }
    absl::Cleanup free_key = [key] { ssh_key_free(key); };
    rc = ssh_userauth_publickey(session, nullptr, key);
  } else {
    if (!options.agent_socket.empty()) {
      FLEET_RETURN_IF_ERROR(SetOption(session, options, SSH_OPTIONS_IDENTITY_AGENT,
                                      options.agent_socket.c_str(), "identity agent"));
    } else if (std::getenv("SSH_AUTH_SOCK") == nullptr) {
      return absl::InvalidArgumentError(
          prefix + "ssh auth: no identity file, and no ssh-agent (SSH_AUTH_SOCK is unset)");
    }
    rc = ssh_userauth_agent(session, nullptr);
  }
  switch (rc) {
    case SSH_AUTH_SUCCESS:
      return absl::OkStatus();
    case SSH_AUTH_DENIED:
    case SSH_AUTH_PARTIAL: {
      // What the server would accept, as OpenSSH's client says it.
      const int methods = ssh_userauth_list(session, nullptr);
      std::vector<std::string> names;
      if (methods & SSH_AUTH_METHOD_PUBLICKEY) names.push_back("publickey");
      if (methods & SSH_AUTH_METHOD_PASSWORD) names.push_back("password");
      if (methods & SSH_AUTH_METHOD_INTERACTIVE) names.push_back("keyboard-interactive");
      if (methods & SSH_AUTH_METHOD_HOSTBASED) names.push_back("hostbased");
      if (methods & SSH_AUTH_METHOD_GSSAPI_MIC) names.push_back("gssapi-with-mic");
      std::string message = absl::StrCat(prefix, "ssh auth: permission denied");
      if (!names.empty()) absl::StrAppend(&message, " (", absl::StrJoin(names, ","), ")");
      absl::StrAppend(
          &message, " for user ", options.user, " with ",
          options.identity_file.empty() ? "the ssh-agent's keys" : "key " + options.identity_file);
      return absl::PermissionDeniedError(message);
    }
    default:
      return absl::UnavailableError(absl::StrCat(prefix, "ssh auth: ", LibsshError(session)));
  }
}

absl::StatusOr<std::unique_ptr<SshSession>> SshSession::Connect(const SshOptions& options) {
  FLEET_ASSIGN_OR_RETURN(SessionPtr session, OpenTransport(options));
  FLEET_ASSIGN_OR_RETURN(HostKeyScan scan, ReadHostKey(session.get(), options));
  FLEET_RETURN_IF_ERROR(VerifyHostKey(scan, options));
  FLEET_RETURN_IF_ERROR(Authenticate(session.get(), options));
  return std::unique_ptr<SshSession>(
      new SshSession(options, std::move(session), std::move(scan.key.fingerprint)));
}

absl::StatusOr<HostKeyScan> SshSession::ScanHostKey(const SshOptions& options) {
  FLEET_ASSIGN_OR_RETURN(SessionPtr session, OpenTransport(options));
  return ReadHostKey(session.get(), options);
}

absl::StatusOr<HostKeyScan> SshSession::TrustHost(const SshOptions& options,
                                                  std::string_view expected_fingerprint) {
  FLEET_ASSIGN_OR_RETURN(SessionPtr session, OpenTransport(options));
  FLEET_ASSIGN_OR_RETURN(HostKeyScan scan, ReadHostKey(session.get(), options));
  if (!expected_fingerprint.empty() && scan.key.fingerprint != expected_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat(HostPrefix(options), "ssh host key is ", scan.key.fingerprint,
                     ", not the expected ", std::string(expected_fingerprint), "; not trusted"));
  }
  char* entry = nullptr;
  if (ssh_session_export_known_hosts_entry(session.get(), &entry) != SSH_OK || entry == nullptr) {
    return absl::InternalError(
        absl::StrCat(HostPrefix(options), "ssh known_hosts entry: ", LibsshError(session.get())));
  }
  std::string line(entry);
  ssh_string_free_char(entry);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  FLEET_RETURN_IF_ERROR(ReplaceKnownHostsEntry(options, line));
  return scan;
}

absl::StatusOr<std::vector<HostKey>> SshSession::RecordedHostKeys(const SshOptions& options) {
  FLEET_RETURN_IF_ERROR(ValidateOptions(options));
  const std::string prefix = HostPrefix(options);
  const std::string& path = options.known_hosts_path;
  std::vector<HostKey> keys;
  std::string text;
  {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return keys;
    if (fd < 0) {
      return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh known_hosts ", path, ": open"));
    }
    absl::Cleanup close_fd = [fd] { close(fd); };
    char buffer[8192];
    for (;;) {
      const ssize_t n = read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return ErrnoToStatus(errno, absl::StrCat(prefix, "ssh known_hosts ", path, ": read"));
      }
      if (n == 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
  }
  const std::string host = KnownHostsName(options);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t start = line.find_first_not_of(" \t");
    // Comments, and marker lines (@revoked, @cert-authority): neither records a host's key.
    if (start == std::string::npos || line[start] == '#' || line[start] == '@') continue;
    // libssh's own parser, so that patterns, hashed names and ports match as Connect matches
    // them. Lines of other hosts answer SSH_AGAIN; lines it cannot read are not keys of ours.
    ssh_knownhosts_entry* entry = nullptr;
    if (ssh_known_hosts_parse_line(host.c_str(), line.c_str() + start, &entry) != SSH_OK ||
        entry == nullptr) {
      continue;
    }
    absl::Cleanup free_entry = [entry] { ssh_knownhosts_entry_free(entry); };
    FLEET_ASSIGN_OR_RETURN(HostKey key, DescribeKey(entry->publickey, options));
    keys.push_back(std::move(key));
  }
  return keys;
}

bool SshSession::connected() const {
  absl::MutexLock lock(&mu_);
  return !broken_ && ssh_is_connected(session_.get()) != 0;
}

absl::StatusOr<CommandResult> SshSession::Run(const std::vector<std::string>& argv,
                                              std::string_view stdin_data, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) timeout = options_.command_timeout;
  // What the caller asked for, for messages; what is sent may carry the remote deadline.
  FLEET_ASSIGN_OR_RETURN(const std::string command, RemoteQuote(argv));
  std::string sent = command;
  if (options_.remote_deadline && timeout < absl::InfiniteDuration()) {
    std::vector<std::string> wrapped = {
        "timeout", "-s", "KILL",
        absl::StrFormat("%.3f", absl::ToDoubleSeconds(timeout + kRemoteDeadlineGrace))};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    FLEET_ASSIGN_OR_RETURN(sent, RemoteQuote(wrapped));
  }
  const std::string prefix = HostPrefix(options_);
  const auto failed = [&](std::string_view step, ssh_session s) {
    return absl::UnavailableError(absl::StrCat(prefix, "ssh ", std::string(step), " `",
                                               CommandSummary(command), "`: ", LibsshError(s)));
  };

  absl::MutexLock lock(&mu_);
  ssh_session s = session_.get();
  if (broken_ || ssh_is_connected(s) == 0) {
    broken_ = true;
    return absl::UnavailableError(prefix + "ssh: not connected");
  }
  const absl::Time deadline = fleet::SteadyNow() + timeout;

  ExecChannel channel(s, options_.max_output_bytes);
  if (channel.get() == nullptr) return absl::ResourceExhaustedError(prefix + "ssh: no channel");
  if (ssh_channel_open_session(channel.get()) != SSH_OK) {
    broken_ = ssh_is_connected(s) == 0;
    return failed("channel", s);
  }
  if (ssh_channel_request_exec(channel.get(), sent.c_str()) != SSH_OK) {
    broken_ = ssh_is_connected(s) == 0;
    return failed("exec", s);
  }
  // Blocking writes; output that arrives meanwhile goes to the channel's callbacks, so a command
  // that writes while it reads cannot deadlock us.
  size_t written = 0;
  while (written < stdin_data.size()) {
    const size_t chunk = std::min<size_t>(stdin_data.size() - written, 1 << 16);
    const int n =
        ssh_channel_write(channel.get(), stdin_data.data() + written, static_cast<uint32_t>(chunk));
    if (n == SSH_ERROR) {
      broken_ = ssh_is_connected(s) == 0;
      return failed("stdin", s);
    }
    written += static_cast<size_t>(n);
  }
  // EOF even after an empty stdin: a command that reads it must not wait for more.
  if (!channel.closed() && ssh_channel_send_eof(channel.get()) != SSH_OK) {
    broken_ = ssh_is_connected(s) == 0;
    return failed("stdin", s);
  }

  ssh_event event = ssh_event_new();
  if (event == nullptr) return absl::ResourceExhaustedError(prefix + "ssh: no poll event");
  ssh_event_add_session(event, s);
  absl::Cleanup free_event = [event, s] {
    ssh_event_remove_session(event, s);
    ssh_event_free(event);
  };
  while (!channel.closed()) {
    const absl::Duration left = deadline - fleet::SteadyNow();
    if (left <= absl::ZeroDuration()) {
      // OpenSSH honours the signal for non-root logins only; options_.remote_deadline covers
      // the rest. Closing the channel also closes the command's pipes.
      ssh_channel_request_send_signal(channel.get(), "KILL");
      ssh_channel_close(channel.get());
      broken_ = ssh_is_connected(s) == 0;
      return absl::DeadlineExceededError(absl::StrCat(prefix, "ssh run `", CommandSummary(command),
                                                      "`: still running after ",
                                                      absl::FormatDuration(timeout)));
    }
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1, 60 * 1000));
    if (ssh_event_dopoll(event, wait_ms) == SSH_ERROR || ssh_is_connected(s) == 0) {
      broken_ = true;
      return failed("run", s);
    }
  }
  if (!channel.exited()) {
    return absl::UnavailableError(absl::StrCat(prefix, "ssh run `", CommandSummary(command),
                                               "`: channel closed without an exit status"));
  }
  return channel.TakeResult();
}

}  // namespace fleet::daemon

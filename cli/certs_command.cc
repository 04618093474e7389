#include "cli/certs_command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <string_view>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/command_errors.h"
#include "common/base/errno_status.h"
#include "common/base/flag_set.h"
#include "common/base/spawn.h"
#include "common/base/unique_fd.h"

extern char** environ;

namespace fleet::cli {
namespace {

constexpr char kCertsVerb[] = "certs init";
constexpr int64_t kDefaultDays = 825;
constexpr int64_t kCaMinDays = 3650;

// The last few lines of openssl's output, for an error message.
std::string Tail(const std::string& output) {
  std::vector<std::string> lines = absl::StrSplit(output, '\n', absl::SkipWhitespace());
  if (lines.size() > 3) lines.erase(lines.begin(), lines.end() - 3);
  return absl::StrJoin(lines, " / ");
}

// Runs `openssl ARGS...` (found on PATH) by argv, its output captured; an error unless it exits 0.
absl::Status RunOpenssl(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "openssl: pipe");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  SpawnSpec spec;
  spec.argv = {"openssl"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.search_path = true;
  spec.in = SpawnStream::Null();
  spec.out = SpawnStream::Fd(write_end.get());
  spec.err = SpawnStream::Stdout();
  absl::StatusOr<pid_t> spawned = SpawnProcess(spec);
  write_end.Reset();
  if (absl::IsNotFound(spawned.status())) {
    return absl::NotFoundError(
        "openssl is not on PATH: install it (Debian: apt-get install openssl)");
  }
  if (!spawned.ok()) return spawned.status();
  const pid_t pid = *spawned;
  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(read_end.get(), buffer, sizeof(buffer));
    if (n > 0) {
      output.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, "openssl: wait");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  const std::string how = WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                                            : absl::StrCat("signal ", WTERMSIG(status));
  return absl::InternalError(absl::StrCat("openssl ", args[0], " failed (", how, ")",
                                          output.empty() ? "" : ": ", Tail(output)));
}

// An agent's name: it becomes a file name and the certificate's DNS name.
bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsIpv4(const std::string& s) {
  in_addr addr;
  return inet_pton(AF_INET, s.c_str(), &addr) == 1;
}

// A positive 128-bit serial number, in hex.
absl::StatusOr<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (getrandom(raw.data(), raw.size(), 0) != static_cast<ssize_t>(raw.size())) {
    return ErrnoToStatus(errno, "getrandom");
  }
  raw[0] = static_cast<char>(raw[0] & 0x7f);
  std::string hex;
  constexpr char kDigits[] = "0123456789abcdef";
  for (unsigned char c : raw) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 0xf]);
  }
  return hex;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat(path, ": cannot be written"));
  return absl::OkStatus();
}

absl::Status Chmod(const std::string& path, mode_t mode) {
  if (chmod(path.c_str(), mode) != 0) return ErrnoToStatus(errno, absl::StrCat(path, ": chmod"));
  return absl::OkStatus();
}

// Moves a finished file from the scratch directory to its place.
absl::Status Install(const std::string& from, const std::string& to, mode_t mode) {
  if (absl::Status s = Chmod(from, mode); !s.ok()) return s;
  if (rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat(to, ": rename"));
  }
  return absl::OkStatus();
}

// The scratch directory of one run (in DIR, so that rename stays on one file system), removed on
// every way out, and the process's umask 077 meanwhile: openssl creates keys no one else can read.
class Scratch {
 public:
  Scratch() : old_umask_(umask(077)) {}
  ~Scratch() {
    if (!path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(path_, ignored);
    }
    umask(old_umask_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  absl::Status Create(const std::string& dir) {
    std::string templ = dir + "/.certs-init-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      return ErrnoToStatus(errno, absl::StrCat(dir, ": scratch directory"));
    }
    path_ = templ;
    return absl::OkStatus();
  }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  const mode_t old_umask_;
  std::string path_;
};

struct Leaf {
  std::string name;               // CN
  std::string file;               // base name of the .crt/.key
  std::string usage;              // serverAuth or clientAuth
  std::vector<std::string> sans;  // "DNS:x", "IP:y"
};

// A key and a certificate signed by the CA in `dir`, installed as dir/FILE.key and dir/FILE.crt.
absl::Status MakeLeaf(const Leaf& leaf, const std::string& dir, const Scratch& scratch,
                      int64_t days) {
  const std::string key = scratch.Join(leaf.file + ".key");
  const std::string csr = scratch.Join(leaf.file + ".csr");
  const std::string crt = scratch.Join(leaf.file + ".crt");
  const std::string cnf = scratch.Join(leaf.file + ".cnf");
  absl::Status s = WriteText(
      cnf, absl::StrCat("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = ", leaf.name,
                        "\n[ext]\nbasicConstraints = critical,CA:FALSE\n"
                        "keyUsage = critical,digitalSignature\n"
                        "extendedKeyUsage = ",
                        leaf.usage, "\nsubjectAltName = ", absl::StrJoin(leaf.sans, ","),
                        "\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid,issuer\n"));
  if (!s.ok()) return s;
  absl::StatusOr<std::string> serial = RandomHex(16);
  if (!serial.ok()) return serial.status();
  if (s = RunOpenssl(
          {"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key});
      !s.ok()) {
    return s;
  }
  if (s = RunOpenssl({"req", "-new", "-config", cnf, "-key", key, "-out", csr}); !s.ok()) return s;
  if (s = RunOpenssl({"x509", "-req", "-in", csr, "-CA", dir + "/ca.crt", "-CAkey", dir + "/ca.key",
                      "-set_serial", "0x" + *serial, "-days", absl::StrCat(days), "-sha256",
                      "-extfile", cnf, "-extensions", "ext", "-out", crt});
      !s.ok()) {
    return s;
  }
  if (s = Install(key, dir + "/" + leaf.file + ".key", 0600); !s.ok()) return s;
  return Install(crt, dir + "/" + leaf.file + ".crt", 0644);
}

absl::Status MakeCa(const std::string& dir, const Scratch& scratch, int64_t days) {
  const std::string key = scratch.Join("ca.key");
  const std::string crt = scratch.Join("ca.crt");
  const std::string cnf = scratch.Join("ca.cnf");
  absl::StatusOr<std::string> serial = RandomHex(16);
  if (!serial.ok()) return serial.status();
  absl::Status s = WriteText(
      cnf, absl::StrCat("[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3_ca\n"
                        "[dn]\nCN = gpu-fleet CA ",
                        serial->substr(0, 8),
                        "\n[v3_ca]\nbasicConstraints = critical,CA:TRUE\n"
                        "keyUsage = critical,keyCertSign,cRLSign\n"
                        "subjectKeyIdentifier = hash\n"));
  if (!s.ok()) return s;
  if (s = RunOpenssl(
          {"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key});
      !s.ok()) {
    return s;
  }
  if (s = RunOpenssl({"req", "-new", "-x509", "-config", cnf, "-key", key, "-set_serial",
                      "0x" + *serial, "-days", absl::StrCat(days), "-sha256", "-out", crt});
      !s.ok()) {
    return s;
  }
  if (s = Install(key, dir + "/ca.key", 0600); !s.ok()) return s;
  return Install(crt, dir + "/ca.crt", 0644);
}

int Fail(std::ostream& err, absl::string_view message) {
  err << "fleetctl " << kCertsVerb << ": " << message << "\n";
  return kExitError;
}

}  // namespace

int RunCerts(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::ostream& out = *ctx.out;
  std::ostream& err = *ctx.err;
  std::string dir = kDefaultCertsDir;
  std::vector<std::string> agent_lists;
  std::vector<std::string> listen_lists;
  std::vector<std::string> client_lists;
  int64_t days = kDefaultDays;
  bool force = false;
  FlagSet flags(
      "fleetctl certs init [--dir DIR] [--agents NAME,...] [--listen-names NAME,...]\n"
      "                    [--clients NAME,...] [--days N] [--force]",
      "Creates the fleet's mutual-TLS material with openssl (no daemon): a CA (ca.key, ca.crt),\n"
      "fleetd's client certificate (fleetd.crt, fleetd.key) and, per agent NAME, a server\n"
      "certificate (agent-NAME.crt, agent-NAME.key) that names NAME only (the container's\n"
      "address, or its channel's tls_name), all signed by the CA. Keys are 0600. An existing CA is "
      "reused and a fleetd certificate it\n"
      "signed is kept; an existing agent certificate is replaced only with --force.\n"
      "For fleetd --listen (fleetctl over the network): --listen-names makes fleetd's server\n"
      "certificate (fleetd-listen.crt, .key) naming every NAME fleetctl dials it by, and\n"
      "--clients a client certificate per person or machine (client-NAME.crt, .key) for\n"
      "fleetctl --tls-cert; both are replaced only with --force.");
  flags.AddString("dir", '\0', &dir, "where the files are (created 0700 when missing)", "DIR");
  flags.AddRepeated("agents", '\0', &agent_lists,
                    "agents to make a server certificate for: names or IPv4 addresses, "
                    "comma-separated (repeatable)",
                    "NAME,...");
  flags.AddRepeated("listen-names", '\0', &listen_lists,
                    "fleetd's --listen server certificate, naming these host names or IPv4 "
                    "addresses (all in one certificate; repeatable)",
                    "NAME,...");
  flags.AddRepeated("clients", '\0', &client_lists,
                    "a client certificate for fleetctl --server per NAME (repeatable)", "NAME,...");
  flags.AddInt("days", '\0', &days,
               "validity of the certificates made now (a new CA: at least 3650)");
  flags.AddBool("force", '\0', &force, "replace existing agent certificates");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s.message());
  if (flags.help_requested()) {
    out << flags.Help();
    return kExitOk;
  }
  if (flags.positional().empty() || flags.positional()[0] != "init") {
    return Fail(err,
                "usage: fleetctl certs init [--dir DIR] [--agents NAME,...] [--listen-names "
                "NAME,...] [--clients NAME,...] [--days N] [--force]");
  }
  if (flags.positional().size() > 1) {
    return Fail(err, absl::StrCat("unexpected argument '", flags.positional()[1], "'"));
  }
  if (days < 1 || days > 36500) return Fail(err, "--days must be in 1..36500");
  if (dir.empty()) return Fail(err, "--dir must not be empty");
  std::vector<std::string> agents, listen_names, clients;
  for (auto [lists, names, what] : {std::tuple{&agent_lists, &agents, "agent name"},
                                    std::tuple{&listen_lists, &listen_names, "listen name"},
                                    std::tuple{&client_lists, &clients, "client name"}}) {
    std::set<std::string> seen;
    for (const std::string& list : *lists) {
      for (absl::string_view part : absl::StrSplit(list, ',')) {
        const std::string name(part.data(), part.size());
        if (!ValidName(name)) {
          return Fail(err, absl::StrCat(what, " '", name,
                                        "' is not made of letters, digits, '.', '_' and '-'"));
        }
        if (seen.insert(name).second) names->push_back(name);
      }
    }
  }

  // openssl is there before anything is made.
  if (absl::Status s = RunOpenssl({"version"}); !s.ok()) return Fail(err, s.message());
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (!std::filesystem::create_directories(dir, ec) || ec) {
      return Fail(err, absl::StrCat(dir, ": cannot create: ", ec.message()));
    }
    if (absl::Status s = Chmod(dir, 0700); !s.ok()) return Fail(err, s.message());
  }
  const auto path = [&](const std::string& name) { return dir + "/" + name; };

  // Everything is checked before anything is made.
  const bool have_ca_key = Exists(path("ca.key"));
  const bool have_ca_crt = Exists(path("ca.crt"));
  if (have_ca_key != have_ca_crt) {
    return Fail(err, absl::StrCat(path(have_ca_key ? "ca.key" : "ca.crt"), " exists but ",
                                  path(have_ca_key ? "ca.crt" : "ca.key"),
                                  " does not: restore it, or remove both to make a new CA"));
  }
  const bool reuse_ca = have_ca_key;
  for (const std::string& name : agents) {
    for (const char* ext : {".crt", ".key"}) {
      const std::string file = path(absl::StrCat("agent-", name, ext));
      if (Exists(file) && !force) {
        return Fail(err, absl::StrCat(file, " exists: --force replaces it"));
      }
    }
  }
  std::vector<std::string> replaceable;
  if (!listen_names.empty()) replaceable.push_back("fleetd-listen");
  for (const std::string& name : clients) replaceable.push_back("client-" + name);
  for (const std::string& base : replaceable) {
    for (const char* ext : {".crt", ".key"}) {
      const std::string file = path(base + ext);
      if (Exists(file) && !force) {
        return Fail(err, absl::StrCat(file, " exists: --force replaces it"));
      }
    }
  }
  const bool have_fleetd = Exists(path("fleetd.crt")) || Exists(path("fleetd.key"));
  bool keep_fleetd = false;
  if (have_fleetd) {
    // Kept when whole and signed by this CA.
    keep_fleetd = reuse_ca && Exists(path("fleetd.crt")) && Exists(path("fleetd.key")) &&
                  RunOpenssl({"verify", "-CAfile", path("ca.crt"), path("fleetd.crt")}).ok();
    if (!keep_fleetd && !force) {
      return Fail(err, absl::StrCat(path("fleetd.crt"),
                                    " exists but is incomplete or not signed by the CA ",
                                    path("ca.crt"), ": --force replaces it"));
    }
  }

  Scratch scratch;
  if (absl::Status s = scratch.Create(dir); !s.ok()) return Fail(err, s.message());
  if (reuse_ca) {
    out << "reused " << path("ca.crt") << ": the fleet CA\n";
  } else {
    const int64_t ca_days = std::max(days, kCaMinDays);
    if (absl::Status s = MakeCa(dir, scratch, ca_days); !s.ok()) return Fail(err, s.message());
    out << "created " << path("ca.crt") << ", " << path("ca.key") << ": the fleet CA (" << ca_days
        << " days)\n";
  }
  if (keep_fleetd) {
    out << "kept " << path("fleetd.crt") << ": fleetd's client certificate\n";
  } else {
    Leaf leaf{"fleetd", "fleetd", "clientAuth", {"DNS:fleetd"}};
    if (absl::Status s = MakeLeaf(leaf, dir, scratch, days); !s.ok()) return Fail(err, s.message());
    out << (have_fleetd ? "replaced " : "created ") << path("fleetd.crt") << ", "
        << path("fleetd.key") << ": fleetd's client certificate (" << days << " days)\n";
  }
  for (const std::string& name : agents) {
    Leaf leaf{name, "agent-" + name, "serverAuth", {}};
    std::set<std::string> sans;
    // Its own name only: were 127.0.0.1 or localhost in every agent's certificate, any agent
    // could pass for another behind a loopback port or an ssh tunnel (fleetd checks the name of
    // the container it dials: the channel's tls_name or address).
    for (std::string san : {"DNS:" + name, IsIpv4(name) ? "IP:" + name : std::string()}) {
      if (!san.empty() && sans.insert(san).second) leaf.sans.push_back(san);
    }
    const bool existed = Exists(path(leaf.file + ".crt")) || Exists(path(leaf.file + ".key"));
    if (absl::Status s = MakeLeaf(leaf, dir, scratch, days); !s.ok()) return Fail(err, s.message());
    out << (existed ? "replaced " : "created ") << path(leaf.file + ".crt") << ", "
        << path(leaf.file + ".key") << ": agent " << name << " (" << absl::StrJoin(leaf.sans, ", ")
        << "; " << days << " days)\n";
  }
  if (!listen_names.empty()) {
    // One certificate for every name fleetctl may dial this fleetd by (--server checks the name
    // of the address it dials).
    Leaf leaf{"fleetd-listen", "fleetd-listen", "serverAuth", {}};
    std::set<std::string> sans;
    for (const std::string& name : listen_names) {
      for (std::string san : {"DNS:" + name, IsIpv4(name) ? "IP:" + name : std::string()}) {
        if (!san.empty() && sans.insert(san).second) leaf.sans.push_back(san);
      }
    }
    const bool existed = Exists(path(leaf.file + ".crt")) || Exists(path(leaf.file + ".key"));
    if (absl::Status s = MakeLeaf(leaf, dir, scratch, days); !s.ok()) return Fail(err, s.message());
    out << (existed ? "replaced " : "created ") << path(leaf.file + ".crt") << ", "
        << path(leaf.file + ".key") << ": fleetd's --listen certificate ("
        << absl::StrJoin(leaf.sans, ", ") << "; " << days << " days)\n";
  }
  for (const std::string& name : clients) {
    // A client certificate only (clientAuth): it cannot serve as an agent or as fleetd.
    Leaf leaf{name, "client-" + name, "clientAuth", {"DNS:" + name}};
    const bool existed = Exists(path(leaf.file + ".crt")) || Exists(path(leaf.file + ".key"));
    if (absl::Status s = MakeLeaf(leaf, dir, scratch, days); !s.ok()) return Fail(err, s.message());
    out << (existed ? "replaced " : "created ") << path(leaf.file + ".crt") << ", "
        << path(leaf.file + ".key") << ": client " << name << " for fleetctl --server (" << days
        << " days)\n";
  }
  return kExitOk;
}

}  // namespace fleet::cli

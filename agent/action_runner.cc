#include "agent/action_runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/clock.h"
#include "common/base/errno_status.h"
#include "common/base/secret_names.h"
#include "common/base/status_macros.h"
#include "common/base/string_view.h"
#include "common/base/unique_fd.h"
#include "common/log/log.h"
#include "re2/re2.h"

namespace fleet::agent {
namespace {

constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxVersionLength = 64;
constexpr size_t kMaxEnvValueLength = 32 << 10;
constexpr size_t kMaxServerArgLength = 4096;
constexpr size_t kMaxUrlLength = 2048;
// The end of a tool's output is where its error is; the result travels over gRPC into the store.
constexpr size_t kOutputTailBytes = 16 << 10;
using ::fleet::kRedacted;
constexpr char kNextLaunch[] =
    "valid; the daemon records it and it takes effect at the next launch";
// apt-get and dpkg's maintainer scripts need the system's sbin directories, and must not find
// the venv's python3 first, so apt runs on the system PATH, whatever the server's is.
constexpr char kSystemPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr std::array<const char*, 4> kPathVariables = {"PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH",
                                                       "CPATH"};
// pip options a config may give: none reads a file, changes the target or runs a build script.
constexpr std::array<const char*, 9> kPipFlags = {
    "--no-deps", "--no-cache-dir",    "--upgrade",
    "-U",        "--force-reinstall", "--quiet",
    "-q",        "--no-input",        "--disable-pip-version-check"};
constexpr std::array<const char*, 3> kPipUrlOptions = {"--index-url", "-i", "--extra-index-url"};

template <size_t N>
bool OneOf(std::string_view s, const std::array<const char*, N>& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// The grammars. Latin-1: a byte is a character, so a UTF-8 homoglyph never matches [a-z].
const RE2& Grammar(const char* pattern) {
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingLatin1);
  const RE2* re = new RE2(pattern, options);
  if (!re->ok()) {
    log::Get(log::Component::kAgent)
        .critical("action_runner: bad grammar {}: {}", pattern, re->error());
    std::abort();
  }
  return *re;
}
const RE2& PipNameGrammar() {
  static const RE2& re = Grammar("[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?");
  return re;
}
// PEP 440 public versions in normal form, with an optional local part; no epoch, no wildcard.
const RE2& PipVersionGrammar() {
  static const RE2& re = Grammar(
      "[0-9]+(?:\\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\\.post[0-9]+)?(?:\\.dev[0-9]+)?"
      "(?:\\+[A-Za-z0-9]+(?:\\.[A-Za-z0-9]+)*)?");
  return re;
}
const RE2& AptNameGrammar() {
  static const RE2& re = Grammar("[a-z0-9][a-z0-9+.-]+");
  return re;
}
const RE2& AptVersionGrammar() {
  static const RE2& re = Grammar("(?:[0-9]{1,9}:)?[0-9][A-Za-z0-9.+~-]*");
  return re;
}
const RE2& EnvNameGrammar() {
  static const RE2& re = Grammar("[A-Za-z_][A-Za-z0-9_]*");
  return re;
}
const RE2& ServerFlagGrammar() {
  static const RE2& re = Grammar("(?s)--?[A-Za-z0-9][A-Za-z0-9_.-]*(?:=.*)?");
  return re;
}
// http(s), an optional user[:password]@, a host name, an optional port and a path: no query, no
// fragment, nothing a shell or pip's option parser would read specially.
const RE2& IndexUrlGrammar() {
  static const RE2& re = Grammar(
      "https?://(?:[A-Za-z0-9._~%-]+(?::[A-Za-z0-9._~%-]*)?@)?[A-Za-z0-9](?:[A-Za-z0-9.-]*)"
      "(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+@:=,-]*)*");
  return re;
}

bool Matches(std::string_view s, const RE2& re) {
  return RE2::FullMatch(re2::StringPiece(s.data(), s.size()), re);
}

// A value as messages show it: quoted, with control bytes, quotes and non-ASCII bytes escaped, so
// the message names exactly what was rejected and stays one line.
std::string Quote(std::string_view s) {
  return absl::StrCat("'", absl::CHexEscape(AsAbsl(s)), "'");
}

absl::Status Reject(absl::string_view what, std::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", Quote(value), ": ", why));
}

std::string CharName(char c) {
  switch (c) {
    case '\0':
      return "a NUL byte";
    case '\n':
      return "a newline";
    case '\r':
      return "a carriage return";
    case '\t':
      return "a tab";
    case ' ':
      return "a space";
    default:
      break;
  }
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x80) return absl::StrFormat("byte 0x%02x (not ASCII)", byte);
  if (byte < 0x20 || byte == 0x7f) return absl::StrFormat("control byte 0x%02x", byte);
  return absl::StrCat("'", std::string(1, c), "'");
}

// The first control byte (NUL, newline, ...) of `s`, named; "" when there is none.
std::string ControlFlaw(std::string_view s) {
  for (char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) return absl::StrCat("contains ", CharName(c));
  }
  return "";
}

// The first thing wrong with `s` as a plain token (letters, digits and `punctuation`), in a
// reader's terms; "" when only the finer grammar can tell.
std::string TokenFlaw(std::string_view s, std::string_view punctuation) {
  if (s.empty()) return "empty";
  if (s[0] == '-') return "starts with '-' (it would be read as an option)";
  for (char c : s) {
    if (c == '/') return "contains '/' (a path, not a name)";
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        punctuation.find(c) == std::string_view::npos) {
      return absl::StrCat("contains ", CharName(c));
    }
  }
  return "";
}

absl::Status ValidatePipName(std::string_view name) {
  constexpr char kWhat[] = "pip package name";
  if (name.size() > kMaxNameLength) return Reject(kWhat, name, "longer than 128 bytes");
  if (std::string flaw = TokenFlaw(name, "._-"); !flaw.empty()) return Reject(kWhat, name, flaw);
  if (!Matches(name, PipNameGrammar())) {
    return Reject(kWhat, name,
                  "not a PEP 508 name (letters, digits, '.', '_', '-'; starting and ending with a "
                  "letter or digit)");
  }
  return absl::OkStatus();
}

// An absolute path in normal form: no empty, '.' or '..' component, no trailing '/', no control
// byte; `no_colon` for a directory that goes into a PATH-like list.
absl::Status ValidateAbsolutePath(absl::string_view what, std::string_view path, bool no_colon) {
  if (path.empty()) return Reject(what, path, "empty");
  if (path.size() > PATH_MAX) return Reject(what, path.substr(0, 64), "longer than PATH_MAX");
  if (std::string flaw = ControlFlaw(path); !flaw.empty()) return Reject(what, path, flaw);
  if (path[0] != '/') return Reject(what, path, "not an absolute path");
  if (no_colon && path.find(':') != std::string_view::npos) {
    return Reject(what, path, "contains ':' (the list separator)");
  }
  if (path == "/") return absl::OkStatus();
  if (path.back() == '/') return Reject(what, path, "not normalized: ends with '/'");
  for (absl::string_view part : absl::StrSplit(AsAbsl(path.substr(1)), '/')) {
    if (part.empty()) return Reject(what, path, "not normalized: contains '//'");
    if (part == ".") return Reject(what, path, "not normalized: contains a '.' component");
    if (part == "..") return Reject(what, path, "contains '..'");
  }
  return absl::OkStatus();
}

absl::Status ValidateIndexUrl(absl::string_view option, std::string_view url) {
  const std::string what = absl::StrCat("pip option ", option, " URL");
  if (url.empty()) return Reject(what, url, "empty");
  if (url.size() > kMaxUrlLength) return Reject(what, url.substr(0, 64), "too long");
  if (std::string flaw = ControlFlaw(url); !flaw.empty()) return Reject(what, url, flaw);
  if (!Matches(url, IndexUrlGrammar())) {
    return Reject(what, url,
                  "not a plain http(s) URL (host, optional port and path; no query, quotes, "
                  "spaces or shell characters)");
  }
  return absl::OkStatus();
}

absl::Status ValidatePipOptions(const std::vector<std::string>& options) {
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string& option = options[i];
    if (OneOf(option, kPipFlags)) continue;
    if (OneOf(option, kPipUrlOptions)) {
      if (i + 1 == options.size()) {
        return absl::InvalidArgumentError(absl::StrCat("pip option ", option, ": needs a URL"));
      }
      FLEET_RETURN_IF_ERROR(ValidateIndexUrl(option, options[++i]));
      continue;
    }
    const size_t eq = option.find('=');
    if (eq != std::string::npos && OneOf(std::string_view(option).substr(0, eq), kPipUrlOptions)) {
      FLEET_RETURN_IF_ERROR(ValidateIndexUrl(option.substr(0, eq), option.substr(eq + 1)));
      continue;
    }
    return Reject("pip option", option,
                  absl::StrCat("not allowed (allowed: ", absl::StrJoin(kPipFlags, " "), " ",
                               absl::StrJoin(kPipUrlOptions, " URL "), " URL)"));
  }
  return absl::OkStatus();
}

// PEP 503's canonical form: two spellings of one project are one requirement.
std::string CanonicalPipName(std::string_view name) {
  std::string out;
  for (char c : name) {
    const bool separator = c == '-' || c == '_' || c == '.';
    if (separator) {
      if (out.empty() || out.back() != '-') out.push_back('-');
    } else {
      out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

// The server's arguments to add or remove: each valid, and the list starts with a flag so that a
// value never attaches to an argument it was not meant for.
absl::Status ValidateServerArgs(const google::protobuf::RepeatedPtrField<std::string>& args) {
  if (args.empty()) return absl::InvalidArgumentError("server args: none given");
  for (const std::string& arg : args) FLEET_RETURN_IF_ERROR(ValidateServerArg(arg));
  if (args[0][0] != '-') {
    return Reject("server args", args[0], "the list must start with a flag such as --name");
  }
  return absl::OkStatus();
}

// What one action came to.
struct Outcome {
  bool ok = false;
  std::string message;
  std::string output;
};

Outcome Refused(const absl::Status& status) {
  return {false, absl::StrCat("rejected: ", status.message()), ""};
}
Outcome Failed(const absl::Status& status) {
  return {false, absl::StrCat("failed: ", status.message()), ""};
}

std::string DescribeExit(const CommandResult& r, absl::Duration timeout) {
  if (r.timed_out)
    return absl::StrCat("timed out after ", absl::FormatDuration(timeout), ", killed");
  if (r.exited) return absl::StrCat("exit status ", r.exit_code);
  return absl::StrCat("killed by signal ", r.signal);
}

Outcome RunTool(CommandRunner& runner, absl::string_view what, const Command& command) {
  absl::StatusOr<CommandResult> ran = runner.Run(command);
  if (!ran.ok()) return {false, absl::StrCat(what, ": ", ran.status().message()), ""};
  return {ran->ok(), absl::StrCat(what, ": ", DescribeExit(*ran, command.timeout)),
          std::move(ran->output)};
}

Outcome RunPipInstall(CommandRunner& runner, const fleet::v1::PipInstall& action,
                      const ActionContext& context) {
  if (action.requirements().empty()) {
    return Refused(absl::InvalidArgumentError("pip install: no requirements"));
  }
  std::vector<std::string> requirements;
  std::set<std::string> seen;
  for (const fleet::v1::Requirement& r : action.requirements()) {
    if (absl::Status s = ValidatePipRequirement(r.name(), r.version()); !s.ok()) return Refused(s);
    if (!seen.insert(CanonicalPipName(r.name())).second) {
      return Refused(Reject("pip requirement", r.name(), "given twice"));
    }
    requirements.push_back(absl::StrCat(r.name(), "==", r.version()));
  }
  if (absl::Status s = ValidatePipOptions(context.pip_options); !s.ok()) return Refused(s);
  Command command;
  if (!context.pip.empty()) {
    command.argv = context.pip;
  } else if (!context.venv.empty()) {
    command.argv = {absl::StrCat(context.venv, "/bin/python"), "-m", "pip"};
  } else {
    return Refused(absl::FailedPreconditionError("pip install: no pip and no venv configured"));
  }
  if (command.argv[0].empty()) {
    return Refused(absl::FailedPreconditionError("pip install: empty pip command configured"));
  }
  command.argv.push_back("install");
  command.argv.insert(command.argv.end(), context.pip_options.begin(), context.pip_options.end());
  command.argv.insert(command.argv.end(), requirements.begin(), requirements.end());
  command.env = context.env;
  command.cwd = "/";
  command.timeout = context.timeout;
  return RunTool(runner, absl::StrCat("pip install ", absl::StrJoin(requirements, " ")), command);
}

// The pip of the context (its own argv, else the venv's python -m pip), or why there is none.
absl::StatusOr<std::vector<std::string>> PipCommand(const ActionContext& context,
                                                    absl::string_view what) {
  std::vector<std::string> argv;
  if (!context.pip.empty()) {
    argv = context.pip;
  } else if (!context.venv.empty()) {
    argv = {absl::StrCat(context.venv, "/bin/python"), "-m", "pip"};
  } else {
    return absl::FailedPreconditionError(absl::StrCat(what, ": no pip and no venv configured"));
  }
  if (argv[0].empty()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": empty pip command configured"));
  }
  return argv;
}

// A rollback's second half: what a remediation's pip install added, removed again.
Outcome RunPipUninstall(CommandRunner& runner, const fleet::v1::PipUninstall& action,
                        const ActionContext& context) {
  if (action.packages().empty()) {
    return Refused(absl::InvalidArgumentError("pip uninstall: no packages"));
  }
  for (const std::string& name : action.packages()) {
    if (absl::Status s = ValidatePipName(name); !s.ok()) return Refused(s);
  }
  absl::StatusOr<std::vector<std::string>> pip = PipCommand(context, "pip uninstall");
  if (!pip.ok()) return Refused(pip.status());
  Command command;
  command.argv = *std::move(pip);
  command.argv.push_back("uninstall");
  command.argv.push_back("-y");
  command.argv.insert(command.argv.end(), action.packages().begin(), action.packages().end());
  command.env = context.env;
  command.cwd = "/";
  command.timeout = context.timeout;
  return RunTool(runner, absl::StrCat("pip uninstall ", absl::StrJoin(action.packages(), " ")),
                 command);
}

Outcome RunAptInstall(CommandRunner& runner, const fleet::v1::AptInstall& action,
                      const ActionContext& context) {
  if (action.packages().empty()) {
    return Refused(absl::InvalidArgumentError("apt-get install: no packages"));
  }
  for (const std::string& p : action.packages()) {
    if (absl::Status s = ValidateAptPackage(p); !s.ok()) return Refused(s);
  }
  Command command;
  command.argv = context.apt_get.empty() ? std::vector<std::string>{"apt-get"} : context.apt_get;
  if (command.argv[0].empty()) {
    return Refused(absl::FailedPreconditionError("apt-get install: empty apt-get configured"));
  }
  for (const char* a : {"install", "-y", "--no-install-recommends"}) command.argv.push_back(a);
  command.argv.insert(command.argv.end(), action.packages().begin(), action.packages().end());
  command.env = context.env;
  command.env["PATH"] = kSystemPath;
  command.env["DEBIAN_FRONTEND"] = "noninteractive";
  command.cwd = "/";
  command.timeout = context.timeout;
  return RunTool(runner, absl::StrCat("apt-get install ", absl::StrJoin(action.packages(), " ")),
                 command);
}

Outcome CheckSetEnv(const fleet::v1::SetEnv& action) {
  if (absl::Status s = ValidateEnvName(action.name()); !s.ok()) return Refused(s);
  const bool secret = IsSecretEnvName(action.name());
  if (absl::Status s = ValidateEnvValue(action.value()); !s.ok()) {
    // A secret's value is never repeated, not even a broken one.
    return Refused(secret ? absl::InvalidArgumentError(absl::StrCat(
                                "env value of ", action.name(), ": ", ControlFlaw(action.value())))
                          : s);
  }
  return {true,
          absl::StrCat("SetEnv ", action.name(), "=", secret ? kRedacted : action.value(), ": ",
                       kNextLaunch),
          ""};
}

Outcome CheckPrependPath(const fleet::v1::PrependPath& action) {
  if (!OneOf(action.variable(), kPathVariables)) {
    return Refused(Reject("path variable", action.variable(),
                          absl::StrCat("not one of ", absl::StrJoin(kPathVariables, " "))));
  }
  if (absl::Status s = ValidateAbsolutePath("directory", action.directory(), /*no_colon=*/true);
      !s.ok()) {
    return Refused(s);
  }
  struct stat st;
  const bool is_dir = stat(action.directory().c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  return {true,
          absl::StrCat("PrependPath ", action.variable(), " ", action.directory(), ": ",
                       kNextLaunch, is_dir ? "" : " (the directory does not exist yet)"),
          ""};
}

Outcome CheckServerArgs(absl::string_view kind, const fleet::v1::ServerArgs& action) {
  if (absl::Status s = ValidateServerArgs(action.args()); !s.ok()) return Refused(s);
  return {true, absl::StrCat(kind, " ", absl::StrJoin(action.args(), " "), ": ", kNextLaunch), ""};
}

// Paths and roots.

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  return dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
}

// {parent, last component} of an absolute, normalized path other than "/".
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

bool IsStrictlyBelow(std::string_view path, std::string_view root) {
  if (root == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > root.size() && path.substr(0, root.size()) == root &&
         path[root.size()] == '/';
}

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoToStatus(errno, absl::StrCat(path, ": realpath"));
  std::string out(resolved);
  std::free(resolved);
  return out;
}

// The configured roots that exist, with their symlinks resolved.
absl::StatusOr<std::vector<std::string>> ResolveRoots(absl::string_view what,
                                                      const std::vector<std::string>& roots) {
  if (roots.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no ", what, " configured"));
  }
  std::vector<std::string> resolved;
  for (const std::string& root : roots) {
    if (root.empty() || root[0] != '/') continue;
    absl::StatusOr<std::string> r = RealPath(root);
    if (r.ok()) resolved.push_back(*std::move(r));
  }
  if (resolved.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("none of the ", what, " exists: ", absl::StrJoin(roots, " ")));
  }
  return resolved;
}

// An absolute, normalized path with the symlinks of its existing part resolved: the realpath of
// its longest existing prefix, and the components below it that do not exist yet.
struct ResolvedPath {
  std::string existing;
  std::vector<std::string> missing;  // outermost first

  std::string Full() const {
    std::string out = existing;
    for (const std::string& m : missing) out = JoinPath(out, m);
    return out;
  }
};

absl::StatusOr<ResolvedPath> ResolveExisting(const std::string& path) {
  ResolvedPath resolved;
  std::string prefix = path;
  while (true) {
    char* real = ::realpath(prefix.c_str(), nullptr);
    if (real != nullptr) {
      resolved.existing = real;
      std::free(real);
      std::reverse(resolved.missing.begin(), resolved.missing.end());
      return resolved;
    }
    if (errno != ENOENT) return ErrnoToStatus(errno, absl::StrCat(prefix, ": realpath"));
    struct stat st;
    if (lstat(prefix.c_str(), &st) == 0) {
      // It exists but does not resolve: a dangling symlink, whose target could appear later.
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, ": a symlink whose target does not exist"));
    }
    if (prefix == "/") return ErrnoToStatus(ENOENT, "/: realpath");
    auto [parent, name] = SplitPath(prefix);
    resolved.missing.push_back(std::move(name));
    prefix = std::move(parent);
  }
}

std::string FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symlink";
  return "a special file";
}

struct TreeRemoval {
  int64_t removed = 0;
  int64_t failed = 0;
  std::string first_error;

  void Fail(const absl::Status& status) {
    if (failed++ == 0) first_error = std::string(status.message());
  }
};

// Deeper than this a cache tree is not walked (one descriptor per level is open).
constexpr int kMaxRemovalDepth = 256;

// Opens the directory `path` (absolute) one component at a time with O_NOFOLLOW: a component
// that is (or was swapped for) a symlink fails with ELOOP or ENOTDIR instead of being followed.
absl::StatusOr<UniqueFd> OpenDirectoryNoFollow(const std::string& path) {
  UniqueFd dir(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return ErrnoToStatus(errno, "/: open");
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    const std::string name(part);
    UniqueFd next(openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return ErrnoToStatus(errno, absl::StrCat(path, ": open ", name, " (not followed)"));
    }
    dir = std::move(next);
  }
  return dir;
}

// Removes what the directory open at `dir` holds, by descriptors: each entry is looked at with
// fstatat(AT_SYMLINK_NOFOLLOW) relative to its parent's descriptor and removed with unlinkat
// relative to it; a subdirectory is opened with openat(O_NOFOLLOW | O_DIRECTORY) and checked to
// be the one looked at, so a symlink planted in the cache (or a directory swapped for one during
// the walk) is removed as a link and never followed, and no path is resolved again. Another file
// system below (a mount point) is left alone. Takes `dir`.
void RemoveContents(UniqueFd dir, dev_t device, const std::string& where, int depth,
                    TreeRemoval* removal) {
  DIR* stream = fdopendir(dir.get());
  if (stream == nullptr) {
    removal->Fail(ErrnoToStatus(errno, absl::StrCat(where, ": opendir")));
    return;
  }
  dir.Release();  // the stream owns it now
  std::vector<std::string> names;
  while (dirent* e = readdir(stream)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  const int fd = dirfd(stream);
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(where, "/", name);
    struct stat st;
    if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) removal->Fail(ErrnoToStatus(errno, absl::StrCat(path, ": stat")));
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != device) {
        removal->Fail(absl::FailedPreconditionError(
            absl::StrCat(path, ": another file system is mounted there; left")));
        continue;
      }
      if (depth >= kMaxRemovalDepth) {
        removal->Fail(absl::FailedPreconditionError(
            absl::StrCat(path, ": deeper than ", kMaxRemovalDepth, " levels; left")));
        continue;
      }
      UniqueFd child(openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat opened;
      if (!child.valid() || fstat(child.get(), &opened) != 0) {
        removal->Fail(ErrnoToStatus(errno, absl::StrCat(path, ": open (not followed)")));
        continue;
      }
      if (opened.st_dev != st.st_dev || opened.st_ino != st.st_ino) {
        removal->Fail(absl::AbortedError(absl::StrCat(path, ": replaced during the walk; left")));
        continue;
      }
      RemoveContents(std::move(child), device, path, depth + 1, removal);
    }
    if (unlinkat(fd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) == 0) {
      ++removal->removed;
    } else if (errno != ENOENT) {
      removal->Fail(
          ErrnoToStatus(errno, absl::StrCat(path, S_ISDIR(st.st_mode) ? ": rmdir" : ": unlink")));
    }
  }
  closedir(stream);
}

Outcome ClearCacheDirectory(const fleet::v1::ClearJitCache& action, const ActionContext& context) {
  const std::string& directory = action.directory();
  if (absl::Status s = ValidateAbsolutePath("jit cache directory", directory, false); !s.ok()) {
    return Refused(s);
  }
  if (directory == "/") return Refused(Reject("jit cache directory", directory, "the root"));
  absl::StatusOr<std::vector<std::string>> roots =
      ResolveRoots("jit_cache_roots", context.jit_cache_roots);
  if (!roots.ok()) return Refused(roots.status());
  auto [parent, name] = SplitPath(directory);
  absl::StatusOr<ResolvedPath> resolved_parent = ResolveExisting(parent);
  if (!resolved_parent.ok()) return Refused(resolved_parent.status());
  std::string target = JoinPath(resolved_parent->Full(), name);
  struct stat st;
  bool exists = lstat(target.c_str(), &st) == 0;
  if (!exists && errno != ENOENT)
    return Failed(ErrnoToStatus(errno, absl::StrCat(target, ": lstat")));
  if (exists && S_ISLNK(st.st_mode)) {
    // A link to a cache directory clears that directory, if it too lies below a root.
    absl::StatusOr<std::string> real = RealPath(target);
    if (!real.ok()) {
      return Refused(
          Reject("jit cache directory", directory, "a symlink whose target does not resolve"));
    }
    target = *std::move(real);
    exists = lstat(target.c_str(), &st) == 0;
  }
  if (std::none_of(roots->begin(), roots->end(),
                   [&](const std::string& root) { return IsStrictlyBelow(target, root); })) {
    return Refused(
        Reject("jit cache directory", directory,
               absl::StrCat("resolves to ", target, ", which is not strictly below a cache root (",
                            absl::StrJoin(*roots, " "), ")")));
  }
  if (!exists) return {true, absl::StrCat(target, " does not exist: nothing to remove"), ""};
  if (!S_ISDIR(st.st_mode)) {
    return Refused(Reject("jit cache directory", directory,
                          absl::StrCat("is ", FileKind(st.st_mode), ", not a directory")));
  }
  // From here on by descriptors only: the parent and the directory are opened without following
  // a link (a component swapped for one since the checks above fails to open), the directory is
  // checked to be the one just looked at, and its tree is removed relative to them.
  auto [target_parent, target_name] = SplitPath(target);
  absl::StatusOr<UniqueFd> parent_fd = OpenDirectoryNoFollow(target_parent);
  if (!parent_fd.ok()) return Failed(parent_fd.status());
  UniqueFd dir(openat(parent_fd->get(), target_name.c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat opened;
  if (!dir.valid() || fstat(dir.get(), &opened) != 0) {
    return Failed(ErrnoToStatus(errno, absl::StrCat(target, ": open (not followed)")));
  }
  if (opened.st_dev != st.st_dev || opened.st_ino != st.st_ino) {
    return Failed(absl::AbortedError(absl::StrCat(target, ": replaced since it was checked")));
  }
  TreeRemoval removal;
  RemoveContents(std::move(dir), opened.st_dev, target, 1, &removal);
  if (unlinkat(parent_fd->get(), target_name.c_str(), AT_REMOVEDIR) == 0) {
    ++removal.removed;
  } else {
    removal.Fail(ErrnoToStatus(errno, absl::StrCat(target, ": rmdir")));
  }
  if (removal.failed > 0) {
    return {
        false,
        absl::StrCat("failed: ", target, ": removed ", removal.removed, " entries, ",
                     removal.failed, " could not be removed (first: ", removal.first_error, ")"),
        ""};
  }
  return {true, absl::StrCat("removed ", target, ": ", removal.removed, " entries"), ""};
}

absl::Status ValidateLinkTarget(std::string_view target) {
  constexpr char kWhat[] = "symlink target";
  if (target.empty()) return Reject(kWhat, target, "empty");
  if (target[0] == '/') return ValidateAbsolutePath(kWhat, target, false);
  if (target.size() > PATH_MAX) return Reject(kWhat, target.substr(0, 64), "longer than PATH_MAX");
  if (std::string flaw = ControlFlaw(target); !flaw.empty()) return Reject(kWhat, target, flaw);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadLink(const std::string& path) {
  std::string buffer(PATH_MAX, '\0');
  const ssize_t n = ::readlink(path.c_str(), buffer.data(), buffer.size());
  if (n < 0) return ErrnoToStatus(errno, absl::StrCat(path, ": readlink"));
  buffer.resize(static_cast<size_t>(n));
  return buffer;
}

Outcome MakeSymlink(const fleet::v1::Symlink& action, const ActionContext& context) {
  const std::string& link = action.link();
  const std::string& target = action.target();
  if (absl::Status s = ValidateAbsolutePath("symlink path", link, false); !s.ok()) {
    return Refused(s);
  }
  if (link == "/") return Refused(Reject("symlink path", link, "the root"));
  if (absl::Status s = ValidateLinkTarget(target); !s.ok()) return Refused(s);
  absl::StatusOr<std::vector<std::string>> roots =
      ResolveRoots("toolkit_roots", context.toolkit_roots);
  if (!roots.ok()) return Refused(roots.status());
  auto [parent, name] = SplitPath(link);
  // The link's own last component is not resolved: an existing link there is what is replaced.
  absl::StatusOr<ResolvedPath> dir = ResolveExisting(parent);
  if (!dir.ok()) return Refused(dir.status());
  const std::string resolved_dir = dir->Full();
  const std::string resolved_link = JoinPath(resolved_dir, name);
  if (std::none_of(roots->begin(), roots->end(),
                   [&](const std::string& root) { return IsStrictlyBelow(resolved_link, root); })) {
    return Refused(
        Reject("symlink path", link,
               absl::StrCat("resolves to ", resolved_link, ", which is not below a toolkit root (",
                            absl::StrJoin(*roots, " "), ")")));
  }
  const std::string target_path = target[0] == '/' ? target : JoinPath(resolved_dir, target);
  struct stat st;
  if (stat(target_path.c_str(), &st) != 0) {
    return Refused(Reject("symlink target", target,
                          absl::StrCat(ErrnoToStatus(errno, target_path).message(),
                                       target[0] == '/' ? "" : " (relative to the link)")));
  }
  if (lstat(resolved_link.c_str(), &st) == 0) {
    if (!S_ISLNK(st.st_mode)) {
      return Refused(Reject("symlink path", link,
                            absl::StrCat("exists and is ", FileKind(st.st_mode),
                                         "; only a symlink is ever replaced")));
    }
    absl::StatusOr<std::string> old = ReadLink(resolved_link);
    if (!old.ok()) return Failed(old.status());
    if (*old == target) {
      return {true, absl::StrCat("symlink ", resolved_link, " -> ", target, ": already so"), ""};
    }
    // A new link under a temporary name, renamed over the old one: at every moment the path is
    // either the old link or the new one.
    static std::atomic<uint64_t> counter{0};
    std::string temp;
    int rc = -1;
    for (int attempt = 0; attempt < 8 && rc != 0; ++attempt) {
      temp = JoinPath(resolved_dir,
                      absl::StrCat(".", name, ".fleet-tmp-", getpid(), "-", counter.fetch_add(1)));
      rc = ::symlink(target.c_str(), temp.c_str());
      if (rc != 0 && errno != EEXIST) break;
    }
    if (rc != 0) return Failed(ErrnoToStatus(errno, absl::StrCat(temp, ": symlink")));
    if (::rename(temp.c_str(), resolved_link.c_str()) != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      return Failed(ErrnoToStatus(err, absl::StrCat(resolved_link, ": rename")));
    }
    return {
        true,
        absl::StrCat("symlink ", resolved_link, " -> ", target, ": replaced (was -> ", *old, ")"),
        ""};
  }
  if (errno != ENOENT) return Failed(ErrnoToStatus(errno, absl::StrCat(resolved_link, ": lstat")));
  std::string made = dir->existing;
  for (const std::string& component : dir->missing) {
    made = JoinPath(made, component);
    if (::mkdir(made.c_str(), 0755) != 0) {
      return Failed(ErrnoToStatus(errno, absl::StrCat(made, ": mkdir")));
    }
  }
  // symlink() never replaces: a file that appeared meanwhile makes it fail, not vanish.
  if (::symlink(target.c_str(), resolved_link.c_str()) != 0) {
    return Failed(ErrnoToStatus(errno, absl::StrCat(resolved_link, ": symlink")));
  }
  return {true,
          absl::StrCat("symlink ", resolved_link, " -> ", target, ": created",
                       dir->missing.empty()
                           ? ""
                           : absl::StrCat(" (and its directories below ", dir->existing, ")")),
          ""};
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &d);
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d)));
}

}  // namespace

absl::Status ValidatePipRequirement(std::string_view name, std::string_view version) {
  FLEET_RETURN_IF_ERROR(ValidatePipName(name));
  const std::string what = absl::StrCat("pip version of ", AsAbsl(name));
  if (version.size() > kMaxVersionLength) return Reject(what, version, "longer than 64 bytes");
  if (std::string flaw = TokenFlaw(version, "._+"); !flaw.empty()) {
    return Reject(what, version, flaw);
  }
  if (!Matches(version, PipVersionGrammar())) {
    return Reject(what, version,
                  "not an exact PEP 440 version such as 13.2.78, 2.9.1+cu130 or 0.3.9.post2");
  }
  return absl::OkStatus();
}

absl::Status ValidateAptPackage(std::string_view package) {
  constexpr char kWhat[] = "apt package";
  const size_t eq = package.find('=');
  const std::string_view name = package.substr(0, eq);
  if (name.size() > kMaxNameLength) return Reject(kWhat, package, "name longer than 128 bytes");
  if (std::string flaw = TokenFlaw(name, "+.-"); !flaw.empty()) {
    return Reject(kWhat, package, flaw);
  }
  if (!Matches(name, AptNameGrammar())) {
    return Reject(kWhat, package,
                  "not a Debian package name (lower-case letters, digits, '+', '-', '.'; at least "
                  "two, starting with a letter or digit)");
  }
  if (name.back() == '-') {
    return Reject(kWhat, package, "ends with '-' (apt-get would remove the package)");
  }
  if (eq == std::string_view::npos) return absl::OkStatus();
  const std::string_view version = package.substr(eq + 1);
  if (version.empty()) return Reject(kWhat, package, "empty version after '='");
  if (version.size() > kMaxVersionLength) return Reject(kWhat, package, "version too long");
  if (std::string flaw = TokenFlaw(version, ".+~-:"); !flaw.empty()) {
    return Reject(kWhat, package, absl::StrCat("version ", flaw));
  }
  if (!Matches(version, AptVersionGrammar())) {
    return Reject(kWhat, package, "not a Debian version ([epoch:]upstream[-revision])");
  }
  return absl::OkStatus();
}

absl::Status ValidateEnvName(std::string_view name) {
  constexpr char kWhat[] = "env name";
  if (name.empty()) return Reject(kWhat, name, "empty");
  if (name.size() > kMaxNameLength) return Reject(kWhat, name, "longer than 128 bytes");
  if (std::string flaw = TokenFlaw(name, "_"); !flaw.empty()) return Reject(kWhat, name, flaw);
  if (!Matches(name, EnvNameGrammar())) {
    return Reject(kWhat, name, "not a name (letters, digits, '_'; not starting with a digit)");
  }
  return absl::OkStatus();
}

absl::Status ValidateEnvValue(std::string_view value) {
  if (value.size() > kMaxEnvValueLength) {
    return Reject("env value", value.substr(0, 64), "longer than 32 KiB");
  }
  for (char c : value) {
    if (c == '\0' || c == '\n' || c == '\r') {
      return Reject("env value", value, absl::StrCat("contains ", CharName(c)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateServerArg(std::string_view arg) {
  constexpr char kWhat[] = "server arg";
  if (arg.empty()) return Reject(kWhat, arg, "empty");
  if (arg.size() > kMaxServerArgLength) return Reject(kWhat, arg.substr(0, 64), "too long");
  if (std::string flaw = ControlFlaw(arg); !flaw.empty()) return Reject(kWhat, arg, flaw);
  if (arg[0] == '-' && !Matches(arg, ServerFlagGrammar())) {
    return Reject(
        kWhat, arg,
        "not a flag (--name or --name=value; the name of letters, digits, '_', '-', '.')");
  }
  return absl::OkStatus();
}

fleet::v1::ActionResult ActionRunner::Apply(const fleet::v1::Action& action,
                                            const ActionContext& context) const {
  const absl::Time start = fleet::SteadyNow();
  fleet::v1::ActionResult result;
  *result.mutable_action() = action;
  Outcome outcome;
  switch (action.kind_case()) {
    case fleet::v1::Action::kSetEnv:
      outcome = CheckSetEnv(action.set_env());
      if (IsSecretEnvName(action.set_env().name())) {
        result.mutable_action()->mutable_set_env()->set_value(kRedacted);
      }
      break;
    case fleet::v1::Action::kPrependPath:
      outcome = CheckPrependPath(action.prepend_path());
      break;
    case fleet::v1::Action::kPipInstall:
      outcome = RunPipInstall(*runner_, action.pip_install(), context);
      break;
    case fleet::v1::Action::kPipUninstall:
      outcome = RunPipUninstall(*runner_, action.pip_uninstall(), context);
      break;
    case fleet::v1::Action::kAptInstall:
      outcome = RunAptInstall(*runner_, action.apt_install(), context);
      break;
    case fleet::v1::Action::kAddServerArgs:
      outcome = CheckServerArgs("AddServerArgs", action.add_server_args());
      break;
    case fleet::v1::Action::kRemoveServerArgs:
      outcome = CheckServerArgs("RemoveServerArgs", action.remove_server_args());
      break;
    case fleet::v1::Action::kClearJitCache:
      outcome = ClearCacheDirectory(action.clear_jit_cache(), context);
      break;
    case fleet::v1::Action::kSymlink:
      outcome = MakeSymlink(action.symlink(), context);
      break;
    case fleet::v1::Action::KIND_NOT_SET:
      outcome = Refused(absl::InvalidArgumentError("action: no kind set"));
      break;
  }
  result.set_ok(outcome.ok);
  result.set_message(RedactSecretValues(outcome.message, context.env));
  // Masked before it is cut, so that no part of a secret survives at the cut.
  std::string tail = RedactSecretValues(outcome.output, context.env);
  if (tail.size() > kOutputTailBytes) tail.erase(0, tail.size() - kOutputTailBytes);
  result.set_output_tail(std::move(tail));
  SetDuration(fleet::SteadyNow() - start, result.mutable_took());
  return result;
}

}  // namespace fleet::agent

#include "common/config/fleet_config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/errno_status.h"
#include "common/base/string_view.h"
#include "common/base/unique_fd.h"
#include "common/config/config_duration.h"
#include "common/config/config_error.h"
#include "common/config/placeholders.h"
#include "common/config/server_name.h"
#include "common/config/webhook_url.h"
#include "common/config/yaml_message_reader.h"

namespace fleet::config {
namespace {

using fleet::v1::Channel;
using fleet::v1::Container;
using fleet::v1::FleetConfig;
using fleet::v1::Host;
using fleet::v1::Policy;
using fleet::v1::Reach;
using fleet::v1::ServerTemplate;
using fleet::v1::ToolCommands;

constexpr int kMaxPort = 65535;

bool IsZero(const google::protobuf::Duration& d) { return d.seconds() == 0 && d.nanos() == 0; }

void DefaultDuration(google::protobuf::Duration* d, absl::Duration value) {
  if (IsZero(*d)) *d = ToProtoDuration(value);
}

std::string DefaultLogPath(const std::string& engine) {
  return engine == "vllm" ? kVllmDefaultLogPath : kSglangDefaultLogPath;
}

void ApplyPolicyDefaults(Policy* policy) {
  DefaultDuration(policy->mutable_stall_timeout(), kDefaultStallTimeout);
  DefaultDuration(policy->mutable_startup_deadline(), kDefaultStartupDeadline);
  DefaultDuration(policy->mutable_backoff_initial(), kDefaultBackoffInitial);
  DefaultDuration(policy->mutable_backoff_max(), kDefaultBackoffMax);
  if (policy->max_attempts() == 0) policy->set_max_attempts(kDefaultMaxAttempts);
  if (policy->max_fixes_per_cause() == 0) policy->set_max_fixes_per_cause(kDefaultMaxFixesPerCause);
  if (policy->remediation() == Policy::REMEDIATION_MODE_UNSPECIFIED) {
    policy->set_remediation(Policy::AUTO);
  }
}

// `given` (may be null) says which fields the file wrote: with it, a boolean left out gets its
// default even when that default is true.
void ApplyDefaults(FleetConfig* config, const SourceMap* given) {
  for (Host& host : *config->mutable_hosts()) {
    Reach* reach = host.mutable_reach();
    if (reach->kind() == Reach::KIND_UNSPECIFIED) reach->set_kind(Reach::LOCAL);
    if (reach->kind() == Reach::SSH) {
      if (reach->port() == 0) reach->set_port(kDefaultSshPort);
      if (reach->user().empty()) reach->set_user(kDefaultSshUser);
    }
    for (Container& container : *host.mutable_containers()) {
      Channel* channel = container.mutable_channel();
      if (channel->kind() == Channel::KIND_UNSPECIFIED) {
        channel->set_kind(reach->kind() == Reach::SSH ? Channel::SSH_TUNNEL : Channel::LOOPBACK);
      }
      if (channel->kind() == Channel::LOOPBACK && channel->address().empty()) {
        channel->set_address(kDefaultAgentSocket);
      }
      if (channel->port() == 0) channel->set_port(kDefaultAgentPort);
      if (container.policy().empty()) container.set_policy(kDefaultPolicyName);
    }
  }
  for (int i = 0; i < config->templates_size(); ++i) {
    ServerTemplate* t = config->mutable_templates(i);
    if (t->engine().empty()) t->set_engine(kDefaultEngine);
    if (t->log_path().empty()) t->set_log_path(DefaultLogPath(t->engine()));
    fleet::v1::Readiness* readiness = t->mutable_readiness();
    const bool vllm = t->engine() == "vllm";
    const bool path_given = !readiness->path().empty();
    if (!path_given) readiness->set_path(vllm ? kVllmReadinessPath : kSglangReadinessPath);
    const bool check_given =
        given != nullptr
            ? given->Has(FieldPath(IndexPath("templates", i), "readiness.completion_check"))
            : path_given;
    if (vllm && !check_given) readiness->set_completion_check(true);
  }
  bool has_default = false;
  for (int i = 0; i < config->policies_size(); ++i) {
    Policy* policy = config->mutable_policies(i);
    ApplyPolicyDefaults(policy);
    if (given != nullptr && !given->Has(FieldPath(IndexPath("policies", i), "canary"))) {
      policy->set_canary(true);
    }
    if (policy->name() == kDefaultPolicyName) has_default = true;
  }
  if (!has_default) *config->add_policies() = BuiltinDefaultPolicy();
}

// `unix:/path`: a unix socket, reachable from this machine only.
bool IsUnixSocketAddress(const std::string& address) { return absl::StartsWith(address, "unix:"); }

// An address only this machine can reach: a loopback IP, `localhost`, or a unix socket.
bool IsLoopbackAddress(const std::string& address) {
  if (address == "localhost") return true;
  if (IsUnixSocketAddress(address)) return true;
  std::string bare = address;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  in_addr v4{};
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    return std::memcmp(&v6, &in6addr_loopback, sizeof(v6)) == 0;
  }
  return false;
}

bool IsEnvName(const std::string& name) {
  if (name.empty()) return false;
  if (!absl::ascii_isalpha(static_cast<unsigned char>(name[0])) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

constexpr size_t kMaxEnvFilePath = 4096;

bool IsAbsolute(const std::string& path) { return !path.empty() && path[0] == '/'; }

std::string Quoted(const std::string& s) { return absl::StrCat("'", absl::CHexEscape(s), "'"); }

// The semantic checks, on a config whose defaults are applied.
class Checker {
 public:
  Checker(const FleetConfig& config, const SourceMap* lines) : config_(config), lines_(lines) {}

  std::vector<ConfigError> Run() {
    IndexTemplatesAndPolicies();
    for (int t = 0; t < config_.templates_size(); ++t) CheckTemplate(t);
    for (int p = 0; p < config_.policies_size(); ++p) CheckPolicy(p);
    if (config_.hosts().empty()) Add("hosts", "at least one host is required");
    absl::flat_hash_map<std::string, std::string> host_names;  // name -> path
    for (int h = 0; h < config_.hosts_size(); ++h) {
      const std::string path = IndexPath("hosts", h);
      const std::string& name = config_.hosts(h).name();
      CheckName(FieldPath(path, "name"), name, "host", &host_names);
      CheckHost(config_.hosts(h), path);
    }
    absl::flat_hash_map<std::string, std::string> notify_names;
    for (int n = 0; n < config_.notify_size(); ++n) CheckNotify(n, &notify_names);
    return std::move(errors_);
  }

 private:
  void Add(std::string path, std::string what) {
    errors_.push_back(ConfigError{std::move(path), std::move(what), 0});
  }

  // Where an earlier thing is, for "first at ...": its line when known, else its path.
  std::string Where(const std::string& path) const {
    const int line = lines_ != nullptr ? lines_->LineOf(path) : 0;
    return line > 0 ? absl::StrCat("line ", line) : path;
  }

  // A name that must be present, valid and unique among `seen` (name -> path of the first).
  void CheckName(const std::string& path, const std::string& name, std::string_view what,
                 absl::flat_hash_map<std::string, std::string>* seen) {
    if (name.empty()) {
      Add(path, absl::StrCat("a ", AsAbsl(what), " needs a name"));
      return;
    }
    if (!IsValidConfigName(name)) {
      Add(path, absl::StrCat("invalid ", AsAbsl(what), " name ", Quoted(name),
                             ": use letters, digits, '.', '_', '-'"));
      return;
    }
    auto [it, inserted] = seen->try_emplace(name, path);
    if (!inserted) {
      Add(path, absl::StrCat("duplicate ", AsAbsl(what), " name ", Quoted(name), " (first at ",
                             Where(it->second), ")"));
    }
  }

  void IndexTemplatesAndPolicies() {
    for (int t = 0; t < config_.templates_size(); ++t) {
      const std::string& name = config_.templates(t).name();
      template_names_.push_back(name);
      templates_.try_emplace(name, t);
    }
    for (int p = 0; p < config_.policies_size(); ++p) {
      const std::string& name = config_.policies(p).name();
      policy_names_.push_back(name);
      policies_.try_emplace(name, p);
    }
  }

  // A name `env` or `env_from_file` may set: false (and said) when it is not one.
  bool CheckEnvName(const std::string& entry_path, const std::string& name) {
    if (!IsEnvName(name)) {
      Add(entry_path, absl::StrCat("invalid environment variable name ", Quoted(name),
                                   ": use letters, digits and '_', not starting with a digit"));
      return false;
    }
    if (name == "CUDA_VISIBLE_DEVICES") {
      Add(entry_path, "CUDA_VISIBLE_DEVICES is set for each server from the container's gpus");
      return false;
    }
    return true;
  }

  void CheckEnv(const std::string& path,
                const google::protobuf::Map<std::string, std::string>& env) {
    // Sorted, so that errors come out in a stable order (Map's order is not).
    std::map<std::string, std::string> sorted(env.begin(), env.end());
    for (const auto& [name, value] : sorted) {
      const std::string entry_path = KeyPath(path, name);
      if (CheckEnvName(entry_path, name) && name == "CUDA_DEVICE_ORDER" && value != "PCI_BUS_ID") {
        // The agent runs every server with PCI_BUS_ID, so that gpus name nvidia-smi's indexes.
        Add(entry_path, absl::StrCat("CUDA_DEVICE_ORDER must be PCI_BUS_ID, got ", Quoted(value),
                                     ": the gpus are nvidia-smi's indexes, which are PCI order"));
      }
      if (value.find('\0') != std::string::npos) {
        Add(entry_path, "an environment value cannot hold a NUL byte");
      }
    }
  }

  // env_from_file: name -> an absolute path in the container, read by the agent at launch. A name
  // may not be in `env` of the same level too (which would win is not obvious).
  void CheckEnvFromFile(const std::string& path,
                        const google::protobuf::Map<std::string, std::string>& files,
                        const google::protobuf::Map<std::string, std::string>& env,
                        const std::string& env_path) {
    std::map<std::string, std::string> sorted(files.begin(), files.end());
    for (const auto& [name, file] : sorted) {
      const std::string entry_path = KeyPath(path, name);
      if (CheckEnvName(entry_path, name) && env.contains(name)) {
        Add(entry_path, absl::StrCat(name, " is also set in ", env_path, ": give it one way"));
      }
      if (!IsAbsolute(file) || file.size() > kMaxEnvFilePath ||
          file.find('\0') != std::string::npos) {
        Add(entry_path, absl::StrCat("must be an absolute path (at most ", kMaxEnvFilePath,
                                     " bytes) of a file in the container, got ", Quoted(file)));
      }
    }
  }

  void CheckPositive(const std::string& path, const google::protobuf::Duration& d) {
    if (d.seconds() < 0 || d.nanos() < 0 || IsZero(d)) Add(path, "must be a positive duration");
  }

  void CheckTemplate(int t) {
    const ServerTemplate& tmpl = config_.templates(t);
    const std::string path = IndexPath("templates", t);
    CheckName(FieldPath(path, "name"), tmpl.name(), "template", &template_paths_);
    if (tmpl.engine() != "sglang" && tmpl.engine() != "vllm") {
      Add(FieldPath(path, "engine"),
          absl::StrCat("unknown engine ", Quoted(tmpl.engine()),
                       DidYouMean(tmpl.engine(), {"sglang", "vllm"}), "; known: sglang, vllm"));
    }
    if (tmpl.argv().empty()) {
      Add(FieldPath(path, "argv"), "at least one argument (the program) is required");
    } else if (tmpl.argv(0).empty()) {
      Add(IndexPath(FieldPath(path, "argv"), 0), "the program must not be empty");
    }
    // Expanded with stand-in values: only the placeholders' names and the path's shape matter.
    PlaceholderValues values = ServerPlaceholders({0}, 1, tmpl.model());
    values.log = "/log";
    for (int i = 0; i < tmpl.argv_size(); ++i) {
      CheckPlaceholders(IndexPath(FieldPath(path, "argv"), i), tmpl.argv(i), tmpl, values);
    }
    const std::string log_path = FieldPath(path, "log_path");
    bool log_ok = CheckPlaceholders(log_path, tmpl.log_path(), tmpl, values);
    if (log_ok) {
      const std::vector<std::string> used = PlaceholdersIn(tmpl.log_path());
      if (std::find(used.begin(), used.end(), "log") != used.end()) {
        Add(log_path, "{log} is the log path itself: it cannot be used in log_path");
        log_ok = false;
      } else {
        absl::StatusOr<std::string> expanded = ExpandPlaceholders(tmpl.log_path(), values);
        if (expanded.ok() && !IsAbsolute(*expanded)) {
          Add(log_path,
              absl::StrCat("must be an absolute path after expansion, got ", Quoted(*expanded)));
          log_ok = false;
        }
      }
    }
    if (!log_ok) bad_log_paths_.insert(t);
    if (!tmpl.workdir().empty() && !IsAbsolute(tmpl.workdir())) {
      Add(FieldPath(path, "workdir"),
          absl::StrCat("must be an absolute path, got ", Quoted(tmpl.workdir())));
    }
    CheckEnv(FieldPath(path, "env"), tmpl.env());
    CheckEnvFromFile(FieldPath(path, "env_from_file"), tmpl.env_from_file(), tmpl.env(),
                     FieldPath(path, "env"));
    const std::string readiness = FieldPath(path, "readiness");
    if (!absl::StartsWith(tmpl.readiness().path(), "/")) {
      Add(FieldPath(readiness, "path"),
          absl::StrCat("an HTTP path starting with '/' is required, got ",
                       Quoted(tmpl.readiness().path())));
    }
    if (tmpl.readiness().has_interval()) {
      CheckPositive(FieldPath(readiness, "interval"), tmpl.readiness().interval());
    }
  }

  // False when `text` has a placeholder error (reported).
  bool CheckPlaceholders(const std::string& path, const std::string& text,
                         const ServerTemplate& tmpl, const PlaceholderValues& values) {
    absl::StatusOr<std::string> expanded = ExpandPlaceholders(text, values);
    if (!expanded.ok()) {
      Add(path, std::string(expanded.status().message()));
      return false;
    }
    const std::vector<std::string> used = PlaceholdersIn(text);
    if (tmpl.model().empty() && std::find(used.begin(), used.end(), "model") != used.end()) {
      Add(path, "uses {model} but the template has no model");
      return false;
    }
    return true;
  }

  // A webhook (Notify): a name, an https URL (http to loopback only), known event types, an
  // absolute secret_file (the key never inline), sane limits.
  void CheckNotify(int n, absl::flat_hash_map<std::string, std::string>* names) {
    const fleet::v1::Notify& notify = config_.notify(n);
    const std::string path = IndexPath("notify", n);
    CheckName(FieldPath(path, "name"), notify.name(), "notify", names);
    if (notify.url().empty()) {
      Add(FieldPath(path, "url"), "a webhook needs a url (https://...)");
    } else if (absl::Status s = CheckWebhookUrl(notify.url()); !s.ok()) {
      Add(FieldPath(path, "url"), std::string(s.message()));
    }
    static constexpr const char* kEvents[] = {"gave_up", "remediation_awaiting_approval",
                                              "remediation_failed", "agent_lost", "recovered"};
    const std::vector<std::string> known(std::begin(kEvents), std::end(kEvents));
    for (int i = 0; i < notify.events_size(); ++i) {
      const std::string& e = notify.events(i);
      if (std::find(known.begin(), known.end(), e) == known.end()) {
        Add(IndexPath(FieldPath(path, "events"), i),
            absl::StrCat("unknown event ", Quoted(e), DidYouMean(e, known),
                         "; known: ", absl::StrJoin(known, ", ")));
      }
    }
    for (const std::string* file : {&notify.secret_file(), &notify.ca_file()}) {
      if (!file->empty() && (!IsAbsolute(*file) || file->size() > 4096)) {
        Add(FieldPath(path, file == &notify.secret_file() ? "secret_file" : "ca_file"),
            "must be an absolute path");
      }
    }
    if (notify.has_timeout()) CheckPositive(FieldPath(path, "timeout"), notify.timeout());
    if (notify.max_attempts() < 0 || notify.max_attempts() > 100) {
      Add(FieldPath(path, "max_attempts"),
          absl::StrCat("must be 1 to 100 (or left out: 8), got ", notify.max_attempts()));
    }
  }

  void CheckPolicy(int p) {
    const Policy& policy = config_.policies(p);
    const std::string path = IndexPath("policies", p);
    CheckName(FieldPath(path, "name"), policy.name(), "policy", &policy_paths_);
    CheckPositive(FieldPath(path, "stall_timeout"), policy.stall_timeout());
    CheckPositive(FieldPath(path, "startup_deadline"), policy.startup_deadline());
    CheckPositive(FieldPath(path, "backoff_initial"), policy.backoff_initial());
    CheckPositive(FieldPath(path, "backoff_max"), policy.backoff_max());
    if (FromProtoDuration(policy.backoff_initial()) > FromProtoDuration(policy.backoff_max())) {
      Add(FieldPath(path, "backoff_initial"),
          absl::StrCat("backoff_initial (", FormatConfigDuration(policy.backoff_initial()),
                       ") is longer than backoff_max (", FormatConfigDuration(policy.backoff_max()),
                       ")"));
    }
    if (policy.max_attempts() < 1) {
      Add(FieldPath(path, "max_attempts"),
          absl::StrCat("must be at least 1, got ", policy.max_attempts()));
    }
    if (policy.max_fixes_per_cause() < 1) {
      Add(FieldPath(path, "max_fixes_per_cause"),
          absl::StrCat("must be at least 1, got ", policy.max_fixes_per_cause()));
    }
    if (!Policy::RemediationMode_IsValid(policy.remediation())) {
      Add(FieldPath(path, "remediation"), "unknown remediation mode");
    }
    if (policy.preflight_attempts() < 0) {
      Add(FieldPath(path, "preflight_attempts"),
          absl::StrCat("must be at least 1 (or left out: 5), got ", policy.preflight_attempts()));
    }
    const std::vector<std::string> kinds(std::begin(kActionKinds), std::end(kActionKinds));
    absl::flat_hash_map<std::string, std::string> seen;
    for (int i = 0; i < policy.allowed_actions_size(); ++i) {
      const std::string& action = policy.allowed_actions(i);
      const std::string action_path = IndexPath(FieldPath(path, "allowed_actions"), i);
      if (std::find(kinds.begin(), kinds.end(), action) == kinds.end()) {
        Add(action_path, absl::StrCat("unknown action ", Quoted(action), DidYouMean(action, kinds),
                                      "; known: ", absl::StrJoin(kinds, ", ")));
        continue;
      }
      auto [it, inserted] = seen.try_emplace(action, action_path);
      if (!inserted) {
        Add(action_path, absl::StrCat("action ", Quoted(action), " listed twice (first at ",
                                      Where(it->second), ")"));
      }
    }
  }

  void CheckHost(const Host& host, const std::string& path) {
    const Reach& reach = host.reach();
    const std::string reach_path = FieldPath(path, "reach");
    switch (reach.kind()) {
      case Reach::LOCAL: {
        const auto ssh_only = [&](bool set, std::string_view field) {
          if (set) {
            Add(FieldPath(reach_path, field),
                "only used when the host is reached over ssh (this one is local)");
          }
        };
        ssh_only(!reach.address().empty(), "address");
        ssh_only(reach.port() != 0, "port");
        ssh_only(!reach.user().empty(), "user");
        ssh_only(!reach.identity_file().empty(), "identity_file");
        ssh_only(!reach.known_hosts().empty(), "known_hosts");
        ssh_only(reach.has_connect_timeout(), "connect_timeout");
        break;
      }
      case Reach::SSH:
        if (reach.address().empty()) {
          Add(FieldPath(reach_path, "address"), "a host reached over ssh needs an address");
        }
        if (reach.port() < 1 || reach.port() > kMaxPort) {
          Add(FieldPath(reach_path, "port"),
              absl::StrCat("port ", reach.port(), " is outside 1..", kMaxPort));
        }
        if (!IsValidConfigName(reach.user())) {
          Add(FieldPath(reach_path, "user"),
              absl::StrCat("invalid user name ", Quoted(reach.user())));
        }
        for (const auto& [field, value] : {std::pair<std::string_view, const std::string*>{
                                               "identity_file", &reach.identity_file()},
                                           {"known_hosts", &reach.known_hosts()}}) {
          if (!value->empty() && !IsAbsolute(*value)) {
            Add(FieldPath(reach_path, field),
                absl::StrCat("must be an absolute path, got ", Quoted(*value)));
          }
        }
        if (reach.has_connect_timeout()) {
          CheckPositive(FieldPath(reach_path, "connect_timeout"), reach.connect_timeout());
        }
        break;
      default:
        Add(FieldPath(reach_path, "kind"), "unknown reach kind");
        break;
    }
    absl::flat_hash_map<std::string, std::string> ctids;
    // Ports on the daemon's own loopback, shared by every loopback container of this host:
    // port -> (what uses it, path).
    std::map<int, std::pair<std::string, std::string>> loopback_ports;
    // The agents' unix sockets on this host: address -> (container, path).
    std::map<std::string, std::pair<std::string, std::string>> sockets;
    for (int c = 0; c < host.containers_size(); ++c) {
      const std::string container_path = IndexPath(FieldPath(path, "containers"), c);
      const Container& container = host.containers(c);
      CheckName(FieldPath(container_path, "ctid"), container.ctid(), "container", &ctids);
      if (host.reach().kind() == Reach::SSH &&
          (container.ctid().empty() || container.ctid()[0] == '0' ||
           !std::all_of(container.ctid().begin(), container.ctid().end(), absl::ascii_isdigit))) {
        Add(FieldPath(container_path, "ctid"),
            absl::StrCat("a container on an ssh host is a Proxmox container id (100, 201, ...), "
                         "got ",
                         Quoted(container.ctid())));
      }
      CheckContainer(host, container, container_path, &loopback_ports);
      const std::string& address = container.channel().address();
      if (host.reach().kind() != Reach::SSH && IsUnixSocketAddress(address)) {
        const std::string address_path = FieldPath(FieldPath(container_path, "channel"), "address");
        auto [it, inserted] = sockets.try_emplace(
            address, absl::StrCat("container ", Quoted(container.ctid())), address_path);
        if (!inserted) {
          Add(address_path,
              absl::StrCat("agent socket ", Quoted(address), " is also the agent socket of ",
                           it->second.first, " (", Where(it->second.second),
                           "): give each container's agent its own"));
        }
      }
    }
  }

  // Why a TCP channel to a loopback address needs TLS.
  static constexpr std::string_view kTcpOnLoopback =
      "a TCP channel, even on loopback (every local user can reach the port; the agent serves "
      "plaintext only on its unix socket, the loopback channel's default address),";

  void CheckChannel(const Host& host, const Channel& channel, const std::string& path) {
    const size_t errors_before = errors_.size();
    const bool ssh = host.reach().kind() == Reach::SSH;
    std::string_view needs_tls;
    switch (channel.kind()) {
      case Channel::LOOPBACK:
        if (ssh) {
          Add(FieldPath(path, "kind"),
              "a loopback channel needs a local host (this one is reached over ssh): use direct "
              "or ssh_tunnel");
        }
        if (!IsLoopbackAddress(channel.address())) {
          Add(FieldPath(path, "address"),
              absl::StrCat("a loopback channel needs a loopback address, got ",
                           Quoted(channel.address())));
        } else if (!IsUnixSocketAddress(channel.address())) {
          needs_tls = kTcpOnLoopback;
        }
        break;
      case Channel::DIRECT:
        if (channel.address().empty()) {
          Add(FieldPath(path, "address"), "a direct channel needs the agent's address");
        } else if (!IsLoopbackAddress(channel.address())) {
          needs_tls = "a direct channel off loopback";
        } else if (!IsUnixSocketAddress(channel.address())) {
          needs_tls = kTcpOnLoopback;
        }
        break;
      case Channel::SSH_TUNNEL:
        if (!ssh) {
          Add(FieldPath(path, "kind"),
              "an ssh_tunnel channel needs a host reached over ssh (this one is local)");
        }
        needs_tls = "an ssh_tunnel channel (TLS end to end)";
        break;
      default:
        Add(FieldPath(path, "kind"), "unknown channel kind");
        break;
    }
    if (IsUnixSocketAddress(channel.address()) && !IsAbsolute(channel.address().substr(5))) {
      Add(FieldPath(path, "address"),
          absl::StrCat("a unix socket address is unix:/absolute/path, got ",
                       Quoted(channel.address())));
    }
    std::vector<std::string> missing;
    if (channel.ca_file().empty()) missing.push_back("ca_file");
    if (channel.cert_file().empty()) missing.push_back("cert_file");
    if (channel.key_file().empty()) missing.push_back("key_file");
    if (!needs_tls.empty() && !missing.empty()) {
      Add(path, absl::StrCat(AsAbsl(needs_tls), " needs mutual TLS: set ca_file, cert_file and ",
                             "key_file (missing: ", absl::StrJoin(missing, ", "), ")"));
    } else if (needs_tls.empty() && !missing.empty() && missing.size() < 3) {
      Add(path, absl::StrCat("TLS needs all of ca_file, cert_file and key_file (missing: ",
                             absl::StrJoin(missing, ", "), ")"));
    }
    // With TLS, fleetd checks that the agent's certificate names this container: the channel's
    // address, or tls_name. A loopback address (ssh_tunnel dials 127.0.0.1) names no container.
    // (Checked on a channel that is otherwise right: one error at a time.)
    if (errors_.size() == errors_before && missing.empty() && channel.tls_name().empty() &&
        (channel.address().empty() || IsLoopbackAddress(channel.address()))) {
      Add(FieldPath(path, "tls_name"),
          absl::StrCat(
              "a TLS channel to ",
              channel.address().empty() ? std::string("127.0.0.1") : Quoted(channel.address()),
              " needs tls_name: the name in this container's agent certificate "
              "(fleetctl certs init --agents NAME), which no other container's carries"));
    }
    if (ssh) {
      // fleetd installs the agent in the container at deploy, with its certificate.
      std::vector<std::string> agent_missing;
      if (channel.agent_cert_file().empty()) agent_missing.push_back("agent_cert_file");
      if (channel.agent_key_file().empty()) agent_missing.push_back("agent_key_file");
      if (!agent_missing.empty()) {
        Add(path, absl::StrCat("a container on an ssh host gets its agent from fleetd, with the "
                               "agent's certificate: set agent_cert_file and agent_key_file "
                               "(fleetctl certs init makes agent-NAME.crt/.key; missing: ",
                               absl::StrJoin(agent_missing, ", "), ")"));
      }
    }
    if (channel.port() < 1 || channel.port() > kMaxPort) {
      Add(FieldPath(path, "port"),
          absl::StrCat("port ", channel.port(), " is outside 1..", kMaxPort));
    }
  }

  void CheckTools(const ToolCommands& tools, const std::string& path) {
    for (const auto& [field, argv] :
         {std::pair<std::string_view, const google::protobuf::RepeatedPtrField<std::string>*>{
              "pip", &tools.pip()},
          {"apt_get", &tools.apt_get()},
          {"nvidia_smi", &tools.nvidia_smi()}}) {
      if (!argv->empty() && argv->Get(0).empty()) {
        Add(IndexPath(FieldPath(path, field), 0), "the program must not be empty");
      }
    }
    if (!tools.venv().empty() && !IsAbsolute(tools.venv())) {
      Add(FieldPath(path, "venv"),
          absl::StrCat("must be an absolute path, got ", Quoted(tools.venv())));
    }
    for (int i = 0; i < tools.pip_options_size(); ++i) {
      if (tools.pip_options(i).empty()) {
        Add(IndexPath(FieldPath(path, "pip_options"), i), "an option must not be empty");
      }
    }
    for (const auto& [field, roots] :
         {std::pair<std::string_view, const google::protobuf::RepeatedPtrField<std::string>*>{
              "jit_cache_roots", &tools.jit_cache_roots()},
          {"toolkit_roots", &tools.toolkit_roots()},
          {"search_path", &tools.search_path()}}) {
      for (int i = 0; i < roots->size(); ++i) {
        const std::string& root = roots->Get(i);
        const std::string root_path = IndexPath(FieldPath(path, field), i);
        if (!IsAbsolute(root)) {
          Add(root_path, absl::StrCat("must be an absolute path, got ", Quoted(root)));
        } else if (root.find_first_not_of('/') == std::string::npos) {
          Add(root_path, "'/' would let remediation act on the whole file system");
        }
      }
    }
  }

  // A server of a container: its GPUs (the lead first) and where the config gives them.
  struct ServerEntry {
    std::vector<int> gpus;
    std::string path;
  };

  // The GPUs a server's argv asks for against those it is given: more than it has is CUDA's
  // "invalid device ordinal" at the first start; several GPUs for a server whose argv sets no
  // parallel size leaves all but one idle. Both are config mistakes, said before any launch.
  void CheckParallelSize(const ServerTemplate& tmpl, const Container& container,
                         const ServerEntry& server) {
    PlaceholderValues values =
        ServerPlaceholders(server.gpus, container.base_port() + server.gpus.front(), tmpl.model());
    values.log = "/log";
    std::vector<std::string> argv;
    for (const std::string& arg : tmpl.argv()) {
      absl::StatusOr<std::string> expanded = ExpandPlaceholders(arg, values);
      if (!expanded.ok()) return;  // said with the template
      argv.push_back(*std::move(expanded));
    }
    const ParallelSize size = ParallelSizeOf(tmpl.engine(), argv);
    // {gpu_count} in the argv (a wrapper's shell string, a config file's name): the size follows
    // the GPUs in a way this cannot read; trusted.
    bool uses_count = false;
    for (const std::string& arg : tmpl.argv()) {
      uses_count = uses_count || absl::StrContains(arg, "{gpu_count}");
    }
    const int64_t given = static_cast<int64_t>(server.gpus.size());
    const std::string gpus = absl::StrJoin(server.gpus, ",");
    const std::string flag =
        tmpl.engine() == "vllm" ? "--tensor-parallel-size {gpu_count}" : "--tp-size {gpu_count}";
    if (size.gpus > given) {
      Add(server.path,
          absl::StrCat("template ", Quoted(tmpl.name()), " asks for ", size.gpus, " GPUs (",
                       size.how, ") but this server has ", given, " (", gpus,
                       "): CUDA would fail with \"invalid device ordinal\"; give it ", size.gpus,
                       " GPUs in servers, or ", flag, " in the template's argv"));
    } else if (given > 1 && size.gpus == 1 && !size.data_parallel && !uses_count) {
      Add(server.path, absl::StrCat("this server has ", given, " GPUs (", gpus, ") but template ",
                                    Quoted(tmpl.name()),
                                    " sets no tensor-parallel size: it would use one of them; add ",
                                    flag, " to its argv"));
    }
  }

  void CheckContainer(const Host& host, const Container& container, const std::string& path,
                      std::map<int, std::pair<std::string, std::string>>* loopback_ports) {
    CheckChannel(host, container.channel(), FieldPath(path, "channel"));

    // The container's servers: one per entry of `gpus`, one per entry of `servers` (several GPUs,
    // the first leading). Each GPU once, across both lists.
    const std::string gpus_path = FieldPath(path, "gpus");
    if (container.gpus().empty() && container.servers().empty()) {
      Add(gpus_path, "at least one GPU index is required (here, or a server's in servers)");
    }
    absl::flat_hash_map<int, std::string> seen;
    const auto take = [&](int gpu, const std::string& gpu_path) {
      if (gpu < 0 || gpu > kMaxGpuIndex) {
        Add(gpu_path, absl::StrCat("GPU index ", gpu, " is outside 0..", kMaxGpuIndex));
        return false;
      }
      auto [it, inserted] = seen.try_emplace(gpu, gpu_path);
      if (!inserted) {
        Add(gpu_path,
            absl::StrCat("GPU ", gpu, " is listed twice (first at ", Where(it->second), ")"));
        return false;
      }
      return true;
    };
    std::vector<ServerEntry> servers;
    for (int i = 0; i < container.gpus_size(); ++i) {
      const std::string gpu_path = IndexPath(gpus_path, i);
      if (take(container.gpus(i), gpu_path)) servers.push_back({{container.gpus(i)}, gpu_path});
    }
    for (int i = 0; i < container.servers_size(); ++i) {
      const std::string server_path = IndexPath(FieldPath(path, "servers"), i);
      const std::string its_gpus = FieldPath(server_path, "gpus");
      const auto& listed = container.servers(i).gpus();
      if (listed.empty()) Add(its_gpus, "at least one GPU index is required");
      bool all = !listed.empty();
      for (int j = 0; j < listed.size(); ++j) all = take(listed[j], IndexPath(its_gpus, j)) && all;
      if (all) servers.push_back({{listed.begin(), listed.end()}, server_path});
    }
    std::vector<int> valid_gpus;  // the servers' leads
    for (const ServerEntry& server : servers) valid_gpus.push_back(server.gpus.front());

    const std::string template_path = FieldPath(path, "template");
    const ServerTemplate* tmpl = nullptr;
    if (container.template_().empty()) {
      Add(template_path, absl::StrCat("required: the server template this container runs",
                                      Known("templates", template_names_)));
    } else if (auto it = templates_.find(container.template_()); it == templates_.end()) {
      Add(template_path, absl::StrCat("no template named ", Quoted(container.template_()),
                                      DidYouMean(container.template_(), template_names_),
                                      Known("templates", template_names_)));
    } else {
      tmpl = &config_.templates(it->second);
    }
    if (!policies_.contains(container.policy())) {
      Add(FieldPath(path, "policy"), absl::StrCat("no policy named ", Quoted(container.policy()),
                                                  DidYouMean(container.policy(), policy_names_),
                                                  Known("policies", policy_names_)));
    }

    const std::string base_port_path = FieldPath(path, "base_port");
    bool ports_ok = true;
    if (container.base_port() == 0) {
      Add(base_port_path, "required: the server for GPU n listens on base_port + n");
      ports_ok = false;
    } else {
      for (int gpu : valid_gpus) {
        const int64_t port = int64_t{container.base_port()} + gpu;
        if (port < 1 || port > kMaxPort) {
          Add(base_port_path, absl::StrCat("base_port ", container.base_port(), " + gpu ", gpu,
                                           " = ", port, " is outside 1..", kMaxPort));
          ports_ok = false;
          break;
        }
      }
    }
    if (ports_ok) CheckPorts(host, container, path, valid_gpus, loopback_ports);

    CheckEnv(FieldPath(path, "env"), container.env());
    CheckEnvFromFile(FieldPath(path, "env_from_file"), container.env_from_file(), container.env(),
                     FieldPath(path, "env"));
    CheckTools(container.tools(), FieldPath(path, "tools"));

    // One log file per server: a log_path without {gpu} or {port} would be shared.
    // (A template whose log_path is wrong in itself was reported with the template.)
    if (tmpl != nullptr && valid_gpus.size() > 1 &&
        !bad_log_paths_.contains(templates_.at(container.template_()))) {
      absl::flat_hash_map<std::string, int> logs;
      for (const ServerEntry& server : servers) {
        const int gpu = server.gpus.front();
        const PlaceholderValues values =
            ServerPlaceholders(server.gpus, container.base_port() + gpu, tmpl->model());
        absl::StatusOr<std::string> log = ExpandPlaceholders(tmpl->log_path(), values);
        if (!log.ok()) break;
        auto [it, inserted] = logs.try_emplace(*log, gpu);
        if (!inserted) {
          Add(template_path,
              absl::StrCat("template ", Quoted(tmpl->name()), " writes the logs of GPU ",
                           it->second, " and GPU ", gpu, " to one file ", Quoted(*log),
                           ": put {gpu} or {port} in its log_path"));
          break;
        }
      }
    }
    if (tmpl != nullptr && ports_ok) {
      for (const ServerEntry& server : servers) CheckParallelSize(*tmpl, container, server);
    }
  }

  // The agent's port and the servers' ports must not collide: within a container, and across the
  // loopback containers of a host (they share the daemon's loopback).
  void CheckPorts(const Host& host, const Container& container, const std::string& path,
                  const std::vector<int>& gpus,
                  std::map<int, std::pair<std::string, std::string>>* loopback_ports) {
    const bool shared = container.channel().kind() == Channel::LOOPBACK;
    std::map<int, std::pair<std::string, std::string>> own;
    auto& used = shared ? *loopback_ports : own;
    const std::string where = absl::StrCat("container ", Quoted(container.ctid()));
    const auto claim = [&](int port, const std::string& user, const std::string& user_path) {
      auto [it, inserted] = used.try_emplace(port, user, user_path);
      if (inserted) return;
      Add(user_path, absl::StrCat("port ", port, " (", user, ") is also used by ", it->second.first,
                                  " (", Where(it->second.second), ")"));
    };
    // An agent on a unix socket uses no port.
    if (!IsUnixSocketAddress(container.channel().address())) {
      claim(container.channel().port(), absl::StrCat("the agent of ", where),
            FieldPath(FieldPath(path, "channel"), "port"));
    }
    for (int gpu : gpus) {
      claim(container.base_port() + gpu, absl::StrCat("GPU ", gpu, " of ", where),
            FieldPath(path, "base_port"));
    }
  }

  static std::string Known(std::string_view what, const std::vector<std::string>& names) {
    if (names.empty()) return absl::StrCat("; the config defines no ", AsAbsl(what));
    return absl::StrCat("; ", AsAbsl(what), ": ", absl::StrJoin(names, ", "));
  }

  const FleetConfig& config_;
  const SourceMap* lines_;
  std::vector<ConfigError> errors_;
  std::vector<std::string> template_names_;
  std::vector<std::string> policy_names_;
  absl::flat_hash_map<std::string, int> templates_;  // name -> first index
  absl::flat_hash_map<std::string, int> policies_;
  absl::flat_hash_map<std::string, std::string> template_paths_;  // for CheckName
  absl::flat_hash_map<std::string, std::string> policy_paths_;
  absl::flat_hash_set<int> bad_log_paths_;  // templates whose log_path was reported
};

}  // namespace

Policy BuiltinDefaultPolicy() {
  Policy policy;
  policy.set_name(kDefaultPolicyName);
  ApplyPolicyDefaults(&policy);
  policy.set_canary(true);
  return policy;
}

absl::StatusOr<FleetConfig> ParseFleetConfig(std::string_view yaml, std::string_view origin) {
  FleetConfig config;
  SourceMap lines;
  std::vector<ConfigError> errors = ReadYamlMessage(yaml, &config, &lines);
  if (!errors.empty()) return ConfigErrorsToStatus(origin, std::move(errors), &lines);
  ApplyDefaults(&config, &lines);
  errors = Checker(config, &lines).Run();
  if (!errors.empty()) return ConfigErrorsToStatus(origin, std::move(errors), &lines);
  return config;
}

absl::StatusOr<FleetConfig> LoadFleetConfig(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("config ", path, ": open"));
  std::string text;
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat("config ", path, ": read"));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    // Bounded: a config past the limit is refused (by size, before parsing) without reading it
    // all.
    if (text.size() > kMaxYamlBytes) break;
  }
  return ParseFleetConfig(text, path);
}

void ApplyConfigDefaults(FleetConfig* config) { ApplyDefaults(config, nullptr); }

std::vector<std::vector<int>> ContainerServerGpus(const fleet::v1::Container& container) {
  std::vector<std::vector<int>> out;
  for (int gpu : container.gpus()) out.push_back({gpu});
  for (const fleet::v1::ServerGpus& server : container.servers()) {
    if (!server.gpus().empty()) out.emplace_back(server.gpus().begin(), server.gpus().end());
  }
  return out;
}

ParallelSize ParallelSizeOf(std::string_view engine, const std::vector<std::string>& argv) {
  struct Kind {
    std::vector<std::string_view> flags;
    int64_t value = 1;
    std::string said;
  };
  const bool vllm = engine == "vllm";
  Kind tensor{vllm ? std::vector<std::string_view>{"--tensor-parallel-size", "-tp"}
                   : std::vector<std::string_view>{"--tp-size", "--tp", "--tensor-parallel-size"}};
  Kind pipeline{vllm ? std::vector<std::string_view>{"--pipeline-parallel-size", "-pp"}
                     : std::vector<std::string_view>{"--pp-size", "--pipeline-parallel-size"}};
  Kind data{vllm ? std::vector<std::string_view>{"--data-parallel-size", "-dp"}
                 : std::vector<std::string_view>{"--dp-size", "--dp", "--data-parallel-size"}};
  bool data_local = false;  // vLLM's --data-parallel-size-local: the ranks are spread over nodes
  for (size_t i = 0; i < argv.size(); ++i) {
    // vLLM's parser takes `--tensor_parallel_size` for `--tensor-parallel-size`.
    std::string normal = argv[i];
    if (vllm && absl::StartsWith(normal, "--")) {
      const size_t end = std::min(normal.find('='), normal.size());
      std::replace(normal.begin() + 2, normal.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
    }
    data_local =
        data_local ||
        (vllm && (absl::StartsWith(normal, "--data-parallel-size-local") || normal == "-dpl"));
    for (Kind* kind : {&tensor, &pipeline, &data}) {
      for (std::string_view flag : kind->flags) {
        std::string_view arg = normal;
        std::string_view value;
        if (arg == flag && i + 1 < argv.size()) {
          value = argv[i + 1];
        } else if (absl::StartsWith(AsAbsl(arg), AsAbsl(flag)) && arg.size() > flag.size() &&
                   arg[flag.size()] == '=') {
          value = arg.substr(flag.size() + 1);
        } else {
          continue;
        }
        int64_t n = 0;
        if (absl::SimpleAtoi(AsAbsl(value), &n) && n >= 1 && n <= kMaxGpuIndex + 1) {
          kind->value = n;
          kind->said = absl::StrCat(AsAbsl(flag), " ", n);
        }
      }
    }
  }
  ParallelSize size;
  size.gpus = tensor.value * pipeline.value;
  std::vector<const Kind*> counted = {&tensor, &pipeline};
  // vLLM runs tp x pp x dp ranks on one node unless told how many are local.
  if (vllm && !data_local) {
    size.gpus *= data.value;
    counted.push_back(&data);
  }
  std::vector<std::string> how;
  for (const Kind* kind : counted) {
    if (!kind->said.empty()) how.push_back(kind->said);
  }
  size.how = absl::StrJoin(how, " x ");
  size.data_parallel = data.value > 1;
  return size;
}

absl::Status ValidateFleetConfig(const FleetConfig& config) {
  FleetConfig effective = config;
  ApplyDefaults(&effective, nullptr);
  return ConfigErrorsToStatus("", Checker(effective, nullptr).Run(), nullptr);
}

}  // namespace fleet::config

#include "cli/hosts_command.h"

#include <algorithm>
#include <ostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_errors.h"
#include "cli/fleet_client.h"
#include "cli/text_table.h"
#include "common/base/flag_set.h"
#include "common/base/json_text.h"

namespace fleet::cli {
namespace {

constexpr char kHostsHelp[] =
    "usage: fleetctl hosts [list] [-o table|json]\n"
    "       fleetctl hosts trust HOST [--fingerprint SHA256:...] [-o text|json]\n"
    "\n"
    "The hosts of fleetd's config and their ssh host keys.\n"
    "\n"
    "  list (the default)  each host: how it is reached, its containers, the host keys its\n"
    "                      known_hosts file holds\n"
    "  trust HOST          fleetd connects to HOST and shows its key and whether it is new,\n"
    "                      trusted or CHANGED; nothing is recorded. Check the fingerprint on the\n"
    "                      host itself, then confirm it: trust HOST --fingerprint SHA256:...\n"
    "                      records the key, only if HOST still shows it.\n"
    "\n"
    "Run 'fleetctl hosts list --help' or 'fleetctl hosts trust --help' for their flags.\n";

// "address:port", an IPv6 literal in brackets; "" for no address.
std::string AddressPort(const std::string& address, int port) {
  if (address.empty()) return "";
  const bool v6 = absl::StrContains(address, ':');
  return absl::StrCat(v6 ? "[" : "", address, v6 ? "]" : "", ":", port);
}

std::string KeysText(const google::protobuf::RepeatedPtrField<v1::SshHostKey>& keys) {
  return absl::StrJoin(keys, ", ", [](std::string* out, const v1::SshHostKey& k) {
    absl::StrAppend(out, k.key_type(), " ", k.fingerprint());
  });
}

// Where the host keeps the public key of this type, for `ssh-keygen -lf` on the host.
std::string HostKeyFile(const std::string& type) {
  if (absl::StrContains(type, "ed25519")) return "/etc/ssh/ssh_host_ed25519_key.pub";
  if (absl::StrContains(type, "ecdsa")) return "/etc/ssh/ssh_host_ecdsa_key.pub";
  if (absl::StrContains(type, "rsa")) return "/etc/ssh/ssh_host_rsa_key.pub";
  return "/etc/ssh/ssh_host_*_key.pub";
}

Json KeysJson(const google::protobuf::RepeatedPtrField<v1::SshHostKey>& keys) {
  Json json = Json::array();
  for (const v1::SshHostKey& k : keys) {
    Json key = Json::object();
    key["key_type"] = k.key_type();
    key["fingerprint"] = k.fingerprint();
    json.push_back(std::move(key));
  }
  return json;
}

std::string HostsJson(const v1::ListHostsResponse& response) {
  Json hosts = Json::array();
  for (const v1::HostRow& h : response.hosts()) {
    Json host = Json::object();
    host["name"] = h.name();
    host["reach"] = h.reach();
    host["address"] = h.address();
    host["port"] = h.port();
    host["user"] = h.user();
    host["identity_file"] = h.identity_file();
    host["known_hosts"] = h.known_hosts();
    host["containers"] = h.containers();
    host["host_keys"] = KeysJson(h.host_keys());
    host["host_keys_error"] = h.host_keys_error();
    hosts.push_back(std::move(host));
  }
  Json json = Json::object();
  json["hosts"] = std::move(hosts);
  return JsonText(std::move(json));
}

std::string TrustJson(const v1::TrustHostResponse& r) {
  Json json = Json::object();
  json["host"] = r.host();
  json["address"] = r.address();
  json["key_type"] = r.key_type();
  json["fingerprint"] = r.fingerprint();
  json["key_state"] = r.key_state();
  json["recorded"] = r.recorded();
  json["known_hosts"] = r.known_hosts();
  json["previous_keys"] = KeysJson(r.previous_keys());
  return JsonText(std::move(json));
}

// The human form of fleetd's answer.
std::string TrustText(const v1::TrustHostResponse& r) {
  const std::string& host = r.host();
  const std::string key = absl::StrCat(r.key_type(), " key ", r.fingerprint());
  if (r.recorded()) {
    std::string text =
        absl::StrCat("recorded ", key, " of ", host, " (", r.address(), ") in ", r.known_hosts());
    if (r.key_state() == "trusted") absl::StrAppend(&text, " (it was trusted already)");
    absl::StrAppend(&text, "\n");
    if (r.key_state() == "changed") {
      absl::StrAppend(&text, "replaced ", KeysText(r.previous_keys()), "\n");
    }
    return text;
  }
  std::string text = absl::StrCat("host ", host, " (", r.address(), ") shows ", key, "\n");
  if (r.key_state() == "trusted") {
    absl::StrAppend(&text, "trusted: ", r.known_hosts(), " has this key for ", host,
                    "; nothing to do\n");
    return text;
  }
  if (r.key_state() == "changed") {
    absl::StrAppend(&text, "CHANGED: ", r.known_hosts(), " has ", KeysText(r.previous_keys()),
                    " for ", host, ", and fleetd refuses to connect\n", "if ", host,
                    " was reinstalled that is expected; otherwise someone may be intercepting "
                    "the connection\n");
  } else {
    absl::StrAppend(&text, "new: ", r.known_hosts(), " has no key for ", host, "\n");
  }
  absl::StrAppend(&text, "check the fingerprint on ", host, " itself (ssh-keygen -lf ",
                  HostKeyFile(r.key_type()), "), then run: fleetctl hosts trust ", host,
                  " --fingerprint ", r.fingerprint(), "\n");
  return text;
}

int RunList(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string output = "table";
  FlagSet flags("fleetctl hosts [list] [-o table|json]",
                "The hosts of fleetd's config: how each is reached (local, or ssh: address:port\n"
                "and user), its containers, the known_hosts file its ssh host key is checked\n"
                "against and the keys that file holds for it (HOST_KEY 'none': run 'fleetctl\n"
                "hosts trust HOST'). fleetd reads the files; it connects to no host.");
  flags.AddString("output", 'o', &output, "table or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("hosts", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (!CheckOutput("hosts", output, {"table", "json"}, *ctx.err)) return kExitError;
  if (!flags.positional().empty()) {
    *ctx.err << "fleetctl hosts: unexpected argument '" << flags.positional()[0]
             << "' (see fleetctl hosts --help)\n";
    return kExitError;
  }
  FleetClient client(ctx, ctx.timeout);
  absl::StatusOr<v1::ListHostsResponse> response = client.ListHosts(v1::ListHostsRequest());
  if (!response.ok()) return ReportError("hosts", response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  if (output == "json") {
    out << HostsJson(*response) << "\n";
    out.flush();
    return kExitOk;
  }
  if (response->hosts().empty()) {
    *ctx.err << "fleetctl hosts: fleetd's config has no hosts\n";
    return kExitOk;
  }
  TextTable table({"NAME", "REACH", "ADDRESS", "USER", "CONTAINERS", "KNOWN_HOSTS", "HOST_KEY"});
  std::vector<std::string> notes;
  for (const v1::HostRow& h : response->hosts()) {
    std::string key = "-";
    if (h.reach() == "ssh") {
      if (!h.host_keys_error().empty()) {
        key = "?";
        notes.push_back(h.host_keys_error());
      } else if (h.host_keys().empty()) {
        key = "none";
        notes.push_back(absl::StrCat("no key recorded for ", h.name(),
                                     ": run fleetctl hosts trust ", h.name()));
      } else {
        key = KeysText(h.host_keys());
      }
    }
    table.AddRow({h.name(), OrDash(h.reach()), OrDash(AddressPort(h.address(), h.port())),
                  OrDash(h.user()), absl::StrCat(h.containers()), OrDash(h.known_hosts()), key});
  }
  out << table.Render(ctx.color());
  out.flush();
  for (const std::string& note : notes) *ctx.err << "fleetctl hosts: " << note << "\n";
  return kExitOk;
}

int RunTrust(const std::vector<std::string>& args, const CommandContext& ctx) {
  std::string fingerprint;
  std::string output = "text";
  FlagSet flags(
      "fleetctl hosts trust HOST [--fingerprint SHA256:...] [-o text|json]",
      "Trusts the ssh host key of HOST (a host of fleetd's config reached over ssh), in two\n"
      "steps. Without --fingerprint, fleetd connects and shows the key the host presents and\n"
      "whether its known_hosts has it (trusted), none for the host (new) or another (CHANGED);\n"
      "nothing is recorded, and the exit status is 0 only when the key is trusted already.\n"
      "Check the fingerprint on the host itself (on its console:\n"
      "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then run it again with\n"
      "--fingerprint: fleetd records the key, in place of the host's old one, only if the\n"
      "host shows that key. Waits at least 1 minute for fleetd (a longer --timeout wins).");
  flags.AddString("fingerprint", '\0', &fingerprint,
                  "record the key only if it has this fingerprint (as shown by the first step)",
                  "SHA256:...");
  flags.AddString("output", 'o', &output, "text or json", "FORMAT");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError("hosts trust", s, *ctx.err);
  if (flags.help_requested()) {
    *ctx.out << flags.Help();
    return kExitOk;
  }
  if (!CheckOutput("hosts trust", output, {"text", "json"}, *ctx.err)) return kExitError;
  if (flags.positional().size() != 1 || flags.positional()[0].empty()) {
    *ctx.err << "fleetctl hosts trust: give one HOST (see --help)\n";
    return kExitError;
  }
  v1::TrustHostRequest request;
  request.set_host(flags.positional()[0]);
  request.set_fingerprint(fingerprint);
  FleetClient client(ctx, std::max(ctx.timeout, kHostsTrustTimeout));
  absl::StatusOr<v1::TrustHostResponse> response = client.TrustHost(request);
  if (!response.ok()) return ReportError("hosts trust", response.status(), *ctx.err);

  std::ostream& out = *ctx.out;
  out << (output == "json" ? TrustJson(*response) + "\n" : TrustText(*response));
  out.flush();
  if (response->recorded() || response->key_state() == "trusted") return kExitOk;
  *ctx.err << "fleetctl hosts trust: nothing recorded: confirm " << response->host()
           << "'s key with --fingerprint " << response->fingerprint() << "\n";
  return kExitError;
}

}  // namespace

int RunHosts(const std::vector<std::string>& args, const CommandContext& ctx) {
  if (args.empty()) return RunList(args, ctx);
  const std::string& sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "list") return RunList(rest, ctx);
  if (sub == "trust") return RunTrust(rest, ctx);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    *ctx.out << kHostsHelp;
    return kExitOk;
  }
  // `fleetctl hosts -o json`: the list's flags without its name.
  if (absl::StartsWith(sub, "-")) return RunList(args, ctx);
  *ctx.err << "fleetctl hosts: unknown sub-verb '" << sub
           << "' (list or trust; see fleetctl hosts --help)\n";
  return kExitError;
}

}  // namespace fleet::cli

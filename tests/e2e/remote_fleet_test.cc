// Remote fleets end to end (issue 6): simulated Proxmox hosts made of real parts. Each host is a
// network namespace with a real sshd (its own host key, root's authorized_keys) and `pct`
// (tests/sim/pct-sim) on root's PATH; each container is a network namespace behind the host's
// bridge with its own root directory (tests/sim/sim_proxmox_host.sh). fleetd reaches the hosts
// with libssh, installs and starts its own fleet-agent in each container with `pct push`/`pct
// exec`, and talks to it with mutual TLS: `direct` to the container's address (routed through the
// host), or `ssh_tunnel` through the host's SSH connection to a container this machine cannot
// reach at all. The servers are the simulated SGLang server of a simulated world.
//
// Shown here: deploy, watch and restart across two hosts (8 servers); a redeploy that changes
// nothing reinstalls nothing; an older agent upgraded in place (its process replaced, its version
// reported); a failed bootstrap step named with host, container and step; hostile arguments
// reaching a program in a container verbatim through ssh and pct. Needs root (namespaces, chroot,
// sshd); skipped with the reason otherwise. LxcBootstrapTest runs the bootstrap against a real LXC
// container instead (tests/sim/pct-lxc; issue 17), skipped without LXC. Waits are on events:
// fleetd's own `status --watch`, a log line, a process's exit; never sleeps.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/agent_client.h"
#include "daemon/remote/agent_bootstrap.h"
#include "daemon/ssh/remote_command.h"
#include "daemon/ssh/ssh_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/eventually.h"
#include "tests/testing/subprocess.h"

namespace fleet {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using SteadyClock = std::chrono::steady_clock;
using sim::testing::BackgroundProcess;
using sim::testing::Env;
using sim::testing::SimWorld;

constexpr std::chrono::seconds kDeadline(90);

std::string SkipReason() {
  if (geteuid() != 0) return "needs root: network and mount namespaces, chroot, sshd";
  for (const char* tool : {"/usr/sbin/sshd", "/usr/bin/ssh-keygen", "/usr/bin/openssl"}) {
    if (access(tool, X_OK) != 0) {
      return absl::StrCat("no ", tool, " (deploy/install-deps.sh installs it)");
    }
  }
  for (const char* tool : {"ip", "unshare", "chroot", "nsenter"}) {
    if (testing::FindOnPath(tool, "/usr/sbin:/usr/bin:/sbin:/bin").empty()) {
      return absl::StrCat("no ", tool, " on PATH (iproute2, util-linux, coreutils)");
    }
  }
  if (access("/run/netns", F_OK) != 0 && mkdir("/run/netns", 0755) != 0) {
    return "cannot create /run/netns";
  }
  return "";
}

// Why the real-LXC tests cannot run here ("" when they can).
std::string LxcSkipReason() {
  if (std::string why = SkipReason(); !why.empty()) return why;
  for (const char* tool : {"lxc-start", "lxc-attach", "lxc-info", "debootstrap"}) {
    if (testing::FindOnPath(tool, "/usr/sbin:/usr/bin:/sbin:/bin").empty()) {
      return absl::StrCat("no ", tool, " (deploy/install-deps.sh installs lxc and debootstrap)");
    }
  }
  return "";
}

// The folder of the Debian 12 root of the real-LXC containers (tests/sim/lxc_rootfs.sh):
// $FLEET_LXC_CACHE (tests/run.sh makes the root once there) or the build's lxc-cache.
std::string LxcCache() {
  const char* cache = getenv("FLEET_LXC_CACHE");
  return cache != nullptr && cache[0] != '\0' ? cache : testing::BuildPath("lxc-cache");
}

// `key=value` lines.
std::map<std::string, std::string> KeyValues(const std::string& text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos) {
      out[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return out;
}

// One simulated Proxmox host with its containers; `down` when destroyed.
class SimHost {
 public:
  // With `lxc_cache`, the containers are real LXC containers on the Debian 12 root made (once) in
  // that folder: sim_proxmox_host.sh --lxc.
  SimHost(std::string dir, std::vector<std::string> ctids, bool route,
          std::vector<std::string> binds, std::string lxc_cache = "",
          std::vector<std::string> lxc_options = {})
      : dir_(std::move(dir)), lxc_(!lxc_cache.empty()) {
    std::vector<std::string> argv = {testing::SourcePath("tests/sim/sim_proxmox_host.sh"), "up",
                                     dir_};
    argv.insert(argv.end(), ctids.begin(), ctids.end());
    if (route) argv.push_back("--route");
    for (const std::string& b : binds) {
      argv.push_back("--bind");
      argv.push_back(b);
    }
    if (lxc_) {
      argv.push_back("--lxc");
      argv.push_back(lxc_cache);
      argv.insert(argv.end(), lxc_options.begin(), lxc_options.end());
    }
    testing::RunOptions options;
    options.output_path = dir_ + ".up.log";
    auto r = testing::Run(argv, options);
    if (!r.ok() || !r->exited || r->exit_code != 0) {
      up_error_ = "sim_proxmox_host.sh up: " + (r.ok() ? r->output : r.status().ToString());
      return;
    }
    values_ = KeyValues(r->output);
  }
  ~SimHost() {
    testing::RunOptions options;
    options.output_path = dir_ + ".down.log";
    testing::Run({testing::SourcePath("tests/sim/sim_proxmox_host.sh"), "down", dir_}, options)
        .IgnoreError();
  }
  // Whether it is up; else why not.
  bool ok() const { return values_.count("host_addr") > 0; }
  const std::string& up_error() const { return up_error_; }
  // lxc-start's own errors for container `ctid` (its log's ERROR lines), when it did not start.
  std::string LxcStartErrors(const std::string& ctid) const {
    std::string out;
    for (absl::string_view line :
         absl::StrSplit(testing::ReadFile(dir_ + "/lxc/" + ctid + "/lxc.log"), '\n')) {
      if (absl::StrContains(line, " ERROR ")) absl::StrAppend(&out, line, "\n");
    }
    return out;
  }
  std::string address() const { return values_.at("host_addr"); }
  std::string ct_address(const std::string& ctid) const { return values_.at("ct_" + ctid); }
  // The container's root as this machine sees it; for an LXC container the upper layer of its
  // overlay: what the container wrote (to be read: writing there under a mounted overlay is not
  // defined).
  std::string rootfs(const std::string& ctid) const {
    return lxc_ ? dir_ + "/lxc/" + ctid + "/upper" : dir_ + "/ct/" + ctid + "/rootfs";
  }
  const std::string& dir() const { return dir_; }
  bool lxc() const { return lxc_; }
  // The host's `pct` as root's shell on the host finds it, for a command run on this machine
  // as if by the host (inside the host's namespaces, sim-host-exec, for LXC).
  std::vector<std::string> PctArgv() const {
    if (!lxc_) return {testing::SourcePath("tests/sim/pct-sim"), "--root", dir_ + "/ct"};
    std::string ns;
    for (absl::string_view line : absl::StrSplit(testing::ReadFile(dir_ + "/state"), '\n')) {
      if (absl::ConsumePrefix(&line, "host_ns=")) ns = std::string(line);
    }
    return {testing::SourcePath("tests/sim/sim-host-exec"), ns,
            testing::SourcePath("tests/sim/pct-lxc"), "--lxcpath", dir_ + "/lxc"};
  }
  // The host key as a known_hosts line.
  std::string KnownHostsLine() const {
    std::vector<std::string> words =
        absl::StrSplit(testing::ReadFile(values_.at("host_key")), ' ', absl::SkipEmpty());
    return absl::StrCat(address(), " ", words.at(0), " ", absl::StripAsciiWhitespace(words.at(1)),
                        "\n");
  }
  void Authorize(const std::string& public_key_file) const {
    std::ofstream(dir_ + "/authorized_keys", std::ios::app) << testing::ReadFile(public_key_file);
  }

 private:
  std::string dir_;
  bool lxc_ = false;
  std::map<std::string, std::string> values_;
  std::string up_error_;
};

// The test's key pair, its known_hosts and the fleet's certificates.
struct Credentials {
  std::string identity;
  std::string known_hosts;
  std::string pki;
};

Credentials MakeCredentials(const testing::TempDir& dir, const std::vector<const SimHost*>& hosts,
                            const std::vector<std::string>& agent_names) {
  Credentials c;
  c.identity = dir.Join("id_ed25519");
  c.known_hosts = dir.Join("known_hosts");
  c.pki = dir.Join("pki");
  auto keygen =
      testing::Run({"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", c.identity});
  EXPECT_TRUE(keygen.ok() && keygen->exit_code == 0);
  std::string known;
  for (const SimHost* h : hosts) {
    h->Authorize(c.identity + ".pub");
    known += h->KnownHostsLine();
  }
  dir.WriteFile("known_hosts", known);
  testing::RunOptions options;
  options.output_path = dir.Join("certs.log");
  auto certs = testing::Run({testing::BuildPath("cli/fleetctl"), "certs", "init", "--dir", c.pki,
                             "--agents", absl::StrJoin(agent_names, ",")},
                            options);
  EXPECT_TRUE(certs.ok() && certs->exit_code == 0) << (certs.ok() ? certs->output : "");
  return c;
}

// fleet-agent and fleet-http-probe without their debug information, in `dir`: what a release
// ships (the build's are several times larger, and every byte crosses the SSH connection).
std::string StrippedAgent(const testing::TempDir& dir) {
  std::filesystem::create_directories(dir.Join("agent-bin"));
  for (const char* name : {"fleet-agent", "fleet-http-probe"}) {
    auto r = testing::Run({"strip", "-o", dir.Join(absl::StrCat("agent-bin/", name)),
                           testing::BuildPath(absl::StrCat("agent/", name))});
    EXPECT_TRUE(r.ok() && r->exited && r->exit_code == 0) << name;
  }
  return dir.Join("agent-bin/fleet-agent");
}

daemon::SshOptions Ssh(const SimHost& host, const Credentials& c, const std::string& name) {
  daemon::SshOptions o;
  o.host_name = name;
  o.address = host.address();
  o.identity_file = c.identity;
  o.known_hosts_path = c.known_hosts;
  o.connect_timeout = absl::Seconds(10);
  return o;
}

bool ConnectRefusedOrUnreachable(const std::string& address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  const int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  close(fd);
  return rc != 0;
}

// fleetctl with fleetd's socket; stdout and stderr.
struct Ctl {
  std::string socket;
  std::string log;
  std::pair<int, std::string> operator()(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {"timeout", std::to_string(kDeadline.count()),
                                     testing::BuildPath("cli/fleetctl"), "--socket", socket};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::RunOptions options;
    options.output_path = log;
    std::filesystem::remove(log);
    auto r = testing::Run(argv, options);
    if (!r.ok()) return {-1, std::string(r.status().message())};
    return {r->exited ? r->exit_code : 128 + r->signal, r->output};
  }
};

// `fleetctl status --watch --until-ready`: returns when fleetd says every server is READY (0),
// one gave up (2), or after kDeadline (coreutils `timeout`: 124).
int UntilReady(const Ctl& ctl) {
  return ctl({"--timeout", "30s", "status", "--watch", "--until-ready"}).first;
}

// Each server's state from `fleetctl status -o wide` lines "NAME STATE ...".
std::map<std::string, std::string> States(const Ctl& ctl) {
  std::map<std::string, std::string> out;
  auto [code, text] = ctl({"status", "-o", "wide"});
  if (code != 0) return out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (words.size() >= 2 && absl::StrContains(words[0], "/gpu")) {
      out[std::string(words[0])] = std::string(words[1]);
    }
  }
  return out;
}

bool AllReady(const std::map<std::string, std::string>& states, size_t count) {
  if (states.size() != count) return false;
  for (const auto& [name, state] : states) {
    if (state != "READY") return false;
  }
  return true;
}

std::string Quoted(const std::string& s) { return absl::StrCat("\"", s, "\""); }

// Every process on this machine (containers' included: one kernel) whose command line holds
// each of `needles`, as /proc/PID.
std::vector<std::string> ProcessesWith(const std::vector<std::string>& needles) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = testing::ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.empty() && std::all_of(needles.begin(), needles.end(), [&](const std::string& n) {
          return absl::StrContains(cmdline, n);
        })) {
      out.push_back(entry.path().string());
    }
  }
  return out;
}

// The fleet-agent processes serving `listen` (not the commands that start one).
std::vector<std::string> AgentProcesses(const std::string& listen) {
  std::vector<std::string> out;
  for (const std::string& proc : ProcessesWith({daemon::kRemoteAgent, "--listen", listen})) {
    if (absl::StripAsciiWhitespace(testing::ReadFile(proc + "/comm")) == "fleet-agent") {
      out.push_back(proc);
    }
  }
  return out;
}

// The environment of each of `procs`, one NAME=VALUE per line.
std::vector<std::string> EnvironmentsOf(const std::vector<std::string>& procs) {
  std::vector<std::string> out;
  for (const std::string& proc : procs) {
    // Each variable on a line of its own, the first too: "\nNAME=" finds any.
    std::string environ = "\n" + testing::ReadFile(proc + "/environ");
    std::replace(environ.begin(), environ.end(), '\0', '\n');
    out.push_back(environ);
  }
  return out;
}

// Deploy, watch and restart across two hosts; with `lxc_cache`, their containers are real LXC
// containers (the servers then run in them: the simulated world and the build are bound in).
void TwoHostsDeployWatchAndRestart(const std::string& lxc_cache) {
  testing::TempDir dir;
  auto world = SimWorld::Create(dir.Join("world"), "fixed");
  ASSERT_TRUE(world.ok()) << world.status();
  // Each container has GPUs of its own: pve2's servers find their own nvidia-smi on PATH and hold
  // memory in world2's GPUs, so pve1's GPU check never sees them (the agent waits for a GPU
  // whose memory another container's server holds).
  auto world2 = SimWorld::Create(dir.Join("world2"), "fixed");
  ASSERT_TRUE(world2.ok()) << world2.status();
  // The containers see the world and the build at the same paths (a shared volume).
  const std::vector<std::string> binds = {dir.path(), testing::BuildPath(""),
                                          testing::SourcePath("")};
  SimHost pve1(dir.Join("pve1"), {"201"}, /*route=*/true, binds, lxc_cache);
  SimHost pve2(dir.Join("pve2"), {"202"}, /*route=*/false, binds, lxc_cache);
  ASSERT_TRUE(pve1.ok() && pve2.ok()) << pve1.up_error() << pve2.up_error();
  const std::string ct1 = pve1.ct_address("201");
  const std::string ct2 = pve2.ct_address("202");
  const Credentials creds = MakeCredentials(dir, {&pve1, &pve2}, {ct1, ct2});
  constexpr int kAgentPort = 50151;
  // pve2's container is reachable only from its host: the tunnel is the way in.
  EXPECT_TRUE(ConnectRefusedOrUnreachable(ct2, kAgentPort));

  Env env = world->ServerEnv(0, 500);
  env.erase("CUDA_VISIBLE_DEVICES");
  std::string env_yaml;
  for (const auto& [k, v] : env) absl::StrAppend(&env_yaml, "      ", k, ": ", Quoted(v), "\n");
  auto container = [&](const SimHost& h, const std::string& ctid, const std::string& kind,
                       const std::string& address, SimWorld& gpus) {
    return absl::StrCat(
        "    reach: {kind: ssh, address: ", h.address(),
        ", identity_file: ", Quoted(creds.identity), ", known_hosts: ", Quoted(creds.known_hosts),
        "}\n", "    containers:\n      - ctid: \"", ctid, "\"\n", "        channel: {kind: ", kind,
        ", address: ", address, ", port: ", kAgentPort,
        ", ca_file: ", Quoted(creds.pki + "/ca.crt"),
        ", cert_file: ", Quoted(creds.pki + "/fleetd.crt"),
        ", key_file: ", Quoted(creds.pki + "/fleetd.key"),
        ", agent_cert_file: ", Quoted(absl::StrCat(creds.pki, "/agent-", address, ".crt")),
        ", agent_key_file: ", Quoted(absl::StrCat(creds.pki, "/agent-", address, ".key")), "}\n",
        "        gpus: [0, 1, 2, 3]\n        template: sim\n        base_port: 30000\n"
        "        tools:\n          pip: [",
        Quoted(world->Path("venv/bin/pip")), "]\n          nvidia_smi: [",
        Quoted(gpus.Path("bin/nvidia-smi")),
        "]\n        env:\n          PATH: ", Quoted(gpus.ServerEnv(0, 500).at("PATH")), "\n");
  };
  const std::string yaml = absl::StrCat(
      "hosts:\n  - name: pve1\n", container(pve1, "201", "direct", ct1, *world), "  - name: pve2\n",
      container(pve2, "202", "ssh_tunnel", ct2, *world2),
      "templates:\n  - name: sim\n    engine: sglang\n    model: ", Quoted(world->Model()),
      "\n    argv: [", Quoted(world->Path("venv/bin/python")),
      ", -m, sglang.launch_server, --model-path, \"{model}\", --host, 127.0.0.1, --port, "
      "\"{port}\"]\n    log_path: /var/log/sglang_gpu{gpu}.log\n    env:\n",
      env_yaml,
      "policies:\n  - name: default\n    backoff_initial: 100ms\n    backoff_max: 1s\n"
      "    remediation: off\n");
  dir.WriteFile("fleet.yaml", yaml);

  auto fleetd = BackgroundProcess::Start(
      {testing::BuildPath("daemon/fleetd"), "--state-dir", dir.Join("state"), "--config",
       dir.Join("fleet.yaml"), "--agent-binary", StrippedAgent(dir)},
      {{"PATH", "/usr/bin:/bin"}}, dir.Join("fleetd.log"));
  ASSERT_TRUE(fleetd.ok()) << fleetd.status();
  // fleetd serves once it says so (its socket exists from then on).
  ASSERT_TRUE((*fleetd)
                  ->WaitForLog(
                      [](const std::string& log) {
                        const size_t at = log.find(": serving on ");
                        return at != std::string::npos && log.find('\n', at) != std::string::npos;
                      },
                      kDeadline)
                  .ok())
      << (*fleetd)->Log();
  const Ctl ctl{dir.Join("state/fleetd.sock"), dir.Join("ctl.out")};
  const auto t0 = SteadyClock::now();
  ASSERT_EQ(UntilReady(ctl), 0) << ctl({"status", "-o", "wide"}).second << "\nfleetd:\n"
                                << (*fleetd)->Log() << "\npve2 agent:\n"
                                << testing::ReadFile(pve2.rootfs("202") +
                                                     "/var/log/gpu-fleet-agent.log");
  std::fprintf(stderr, "8 servers on 2 hosts READY %.1f s after fleetd started\n",
               std::chrono::duration<double>(SteadyClock::now() - t0).count());

  // fleetd installed its own agent in each container and started it detached (no systemd
  // there), with mutual TLS.
  for (const auto& [host, ctid] : {std::pair<const SimHost*, std::string>{&pve1, "201"},
                                   std::pair<const SimHost*, std::string>{&pve2, "202"}}) {
    const std::string root = host->rootfs(ctid);
    EXPECT_EQ(access((root + daemon::kRemoteAgent).c_str(), X_OK), 0) << ctid;
    EXPECT_EQ(access((root + daemon::kRemoteProbe).c_str(), X_OK), 0) << ctid;
    struct stat key {};
    ASSERT_EQ(stat((root + "/etc/gpu-fleet/agent.key").c_str(), &key), 0);
    EXPECT_EQ(key.st_mode & 0777, 0600u);
    EXPECT_THAT(testing::ReadFile(root + daemon::kRemoteLog), HasSubstr("mutual TLS"));
  }
  // Still unreachable from here: pve2's servers came up through the tunnel.
  EXPECT_TRUE(ConnectRefusedOrUnreachable(ct2, kAgentPort));
  // Neither the agents nor the servers carry the SSH session's environment (sshd's
  // SSH_CONNECTION and SSH_CLIENT; pct runs in that session): they have the template's.
  const std::vector<std::string> servers =
      EnvironmentsOf(ProcessesWith({world->Path("venv/bin/python"), "sglang.launch_server"}));
  std::vector<std::string> agents =
      EnvironmentsOf(AgentProcesses(absl::StrCat(ct1, ":", kAgentPort)));
  for (std::string& e : EnvironmentsOf(AgentProcesses(absl::StrCat(ct2, ":", kAgentPort)))) {
    agents.push_back(std::move(e));
  }
  EXPECT_GE(servers.size(), 8u);  // a server and its scheduler child, each
  EXPECT_EQ(agents.size(), 2u);
  for (const std::string& environ : servers) {
    EXPECT_THAT(environ, HasSubstr("\nPATH=")) << environ;
    EXPECT_THAT(environ, ::testing::Not(HasSubstr("SSH_CONNECTION="))) << environ;
    EXPECT_THAT(environ, ::testing::Not(HasSubstr("SSH_CLIENT="))) << environ;
  }
  for (const std::string& environ : agents) {
    EXPECT_THAT(environ, HasSubstr("\nPATH=")) << environ;
    EXPECT_THAT(environ, ::testing::Not(HasSubstr("SSH_CONNECTION="))) << environ;
    EXPECT_THAT(environ, ::testing::Not(HasSubstr("SSH_CLIENT="))) << environ;
  }
  const std::string pid1 = testing::ReadFile(pve1.rootfs("201") + daemon::kRemotePidFile);
  const std::string pid2 = testing::ReadFile(pve2.rootfs("202") + daemon::kRemotePidFile);

  // Restart one server on each host: a new attempt each, READY again (followed on fleetd's own
  // change stream, one logfmt line per change).
  auto watch = BackgroundProcess::Start(
      {testing::BuildPath("cli/fleetctl"), "--socket", ctl.socket, "status", "--watch"},
      {{"PATH", "/usr/bin:/bin"}}, dir.Join("watch.log"));
  ASSERT_TRUE(watch.ok()) << watch.status();
  for (const char* server : {"pve1/201/gpu0", "pve2/202/gpu3"}) {
    auto [code, out] = ctl({"restart", server});
    EXPECT_EQ(code, 0) << out;
  }
  auto ready_again = [](const std::string& log, const std::string& server) {
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, " " + server + " READY") &&
          absl::StrContains(line, "attempt=2")) {
        return true;
      }
    }
    return false;
  };
  ASSERT_TRUE((*watch)
                  ->WaitForLog(
                      [&](const std::string& log) {
                        return ready_again(log, "pve1/201/gpu0") &&
                               ready_again(log, "pve2/202/gpu3");
                      },
                      kDeadline)
                  .ok())
      << (*watch)->Log();
  EXPECT_TRUE(AllReady(States(ctl), 8));
  auto [acode, attempts] = ctl({"attempts", "pve2/202/gpu3"});
  EXPECT_EQ(acode, 0);
  EXPECT_THAT(attempts, HasSubstr("restart"));

  // A redeploy of the same config: nothing reinstalled, the same agents.
  auto [dcode, dout] = ctl({"deploy", "-f", dir.Join("fleet.yaml")});
  EXPECT_EQ(dcode, 0) << dout;
  EXPECT_TRUE(AllReady(States(ctl), 8));
  EXPECT_EQ(testing::ReadFile(pve1.rootfs("201") + daemon::kRemotePidFile), pid1);
  EXPECT_EQ(testing::ReadFile(pve2.rootfs("202") + daemon::kRemotePidFile), pid2);
}

TEST(RemoteFleet, TwoHostsDeployWatchAndRestartThroughSshAndPct) {
  if (std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  TwoHostsDeployWatchAndRestart("");
}

// The same against real LXC containers (privileged, no systemd: the agents start detached).
TEST(LxcRemoteFleet, TwoHostsDeployWatchAndRestartThroughSshAndPct) {
  if (std::string why = LxcSkipReason(); !why.empty()) GTEST_SKIP() << why;
  TwoHostsDeployWatchAndRestart(LxcCache());
}

// The bootstrap itself, against one simulated host: an older agent upgraded in place, then a
// run that changes nothing; a step that fails; hostile arguments through ssh and pct.
class BootstrapTest : public ::testing::Test {
 protected:
  // The folder of the Debian 12 root of real LXC containers; empty: chroot containers (pct-sim).
  virtual std::string LxcCache() const { return ""; }
  // sim_proxmox_host.sh's options for the LXC container 201 (--unprivileged 201, --systemd 201).
  virtual std::vector<std::string> LxcOptions() const { return {}; }
  virtual bool MaySkipWhenLxcStartFails() const { return false; }

  void SetUp() override {
    if (std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
    host_.emplace(dir_.Join("pve"), std::vector<std::string>{"201"}, /*route=*/true,
                  std::vector<std::string>{testing::BuildPath(""), testing::SourcePath("")},
                  LxcCache(), LxcOptions());
    if (!host_->ok()) {
      // An unprivileged or a systemd container may not start on every machine (its kernel, its
      // cgroups): skipped then, quoting lxc-start's own error; a privileged one must start.
      const std::string errors = host_->LxcStartErrors("201");
      if (MaySkipWhenLxcStartFails() && !errors.empty() &&
          absl::StrContains(host_->up_error(), "container 201 did not start")) {
        GTEST_SKIP() << "lxc-start: " << errors;
      }
      FAIL() << host_->up_error() << errors;
    }
    ct_ = host_->ct_address("201");
    creds_ = MakeCredentials(dir_, {&*host_}, {ct_});
    auto ssh = daemon::SshSession::Connect(Ssh(*host_, creds_, "pve1"));
    ASSERT_TRUE(ssh.ok()) << ssh.status();
    ssh_ = *std::move(ssh);
    auto package = daemon::FindAgentPackage("", StrippedAgent(dir_));
    ASSERT_TRUE(package.ok()) << package.status();
    package_ = *package;
    spec_.host = "pve1";
    spec_.ctid = "201";
    spec_.listen = ct_ + ":50151";
    spec_.ca_file = creds_.pki + "/ca.crt";
    spec_.agent_cert_file = creds_.pki + "/agent-" + ct_ + ".crt";
    spec_.agent_key_file = creds_.pki + "/agent-" + ct_ + ".key";
    auto tls = daemon::ReadAgentTls("pve1/201", creds_.pki + "/ca.crt", creds_.pki + "/fleetd.crt",
                                    creds_.pki + "/fleetd.key");
    ASSERT_TRUE(tls.ok()) << tls.status();
    client_ = std::make_unique<daemon::GrpcAgentClient>("pve1/201", spec_.listen, *tls);
  }

  // Test bodies run on both kinds of container.
  void OlderAgentReplacedInPlaceAndASecondRunChangesNothing();
  void FailedStepNamesTheHostTheContainerAndTheStep();
  void HostileArgumentsReachAProgramInTheContainerVerbatim();

  absl::StatusOr<daemon::BootstrapResult> Ensure() {
    return daemon::EnsureAgent(*ssh_, package_, spec_,
                               [this](absl::Duration wait) { return client_->Answers(wait); });
  }

  testing::TempDir dir_;
  std::optional<SimHost> host_;
  std::string ct_;
  Credentials creds_;
  std::unique_ptr<daemon::SshSession> ssh_;
  daemon::AgentPackage package_;
  daemon::BootstrapSpec spec_;
  std::unique_ptr<daemon::GrpcAgentClient> client_;
};

void BootstrapTest::OlderAgentReplacedInPlaceAndASecondRunChangesNothing() {
  // An "old agent": reports an old version and runs as fleet-agent with its pid file, like the
  // real one. Written through `pct exec` (an LXC container's root is an overlay: its files are
  // written from inside).
  const std::string old_agent_script =
      "#!/bin/sh\n"
      "if [ \"$1\" = --version ]; then echo 'fleet-agent 0.0.1 (old)'; exit 0; fi\n"
      "echo $$ > /run/gpu-fleet-agent.pid\n"
      "echo old agent running\n"
      "while :; do sleep 1; done\n";
  auto written = ssh_->Run(
      *daemon::PctExecArgv(
          "201",
          {"sh", "-c", "mkdir -p \"$(dirname \"$0\")\" && cat > \"$0\" && chmod 0755 \"$0\"",
           daemon::kRemoteAgent},
          false),
      old_agent_script, absl::Seconds(30));
  ASSERT_TRUE(written.ok() && written->exit_status == 0)
      << (written.ok() ? written->err : written.status().ToString());
  // Started in the container by the host's pct, run here. pct-sim execs every step: the process
  // is the old agent itself; pct-lxc's lxc-attach waits for it and ends when it ends.
  std::vector<std::string> start = host_->PctArgv();
  start.insert(start.end(), {"exec", "201", "--", daemon::kRemoteAgent, "run"});
  auto old_agent = BackgroundProcess::Start(start, {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}},
                                            dir_.Join("old-agent.log"));
  ASSERT_TRUE(old_agent.ok()) << old_agent.status();
  ASSERT_TRUE(
      (*old_agent)
          ->WaitForLog(
              [](const std::string& log) { return absl::StrContains(log, "old agent running\n"); },
              kDeadline)
          .ok())
      << (*old_agent)->Log();
  auto in_container = [&](const std::vector<std::string>& argv) {
    auto out = ssh_->Run(*daemon::PctExecArgv("201", argv, false), "", absl::Seconds(30));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::string(absl::StripAsciiWhitespace(out->out)) : std::string();
  };
  const std::string old_pid = in_container({"cat", daemon::kRemotePidFile});
  ASSERT_FALSE(old_pid.empty());
  if (!host_->lxc()) {
    EXPECT_EQ(old_pid, std::to_string((*old_agent)->pid()));
  }

  auto r = Ensure();
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < r->steps.size() && i < r->step_times.size(); ++i) {
    std::fprintf(stderr, "step %s: %s\n", r->steps[i].c_str(),
                 absl::FormatDuration(r->step_times[i]).c_str());
  }
  EXPECT_EQ(r->previous_version, "fleet-agent 0.0.1 (old)");
  EXPECT_TRUE(r->pushed);
  EXPECT_TRUE(r->started);
  EXPECT_FALSE(r->systemd);
  EXPECT_THAT(r->steps,
              ElementsAre("status", "version", "init", "stage", "push", "start", "health"));
  // The old process is gone (asked to stop: replaced), the new one runs and says its version.
  auto old_exit = (*old_agent)->Wait(kDeadline);
  ASSERT_TRUE(old_exit.ok()) << old_exit.status();
  if (host_->lxc()) {
    // lxc-attach reports the signal that ended its command as 128 + the signal.
    EXPECT_EQ(old_exit->exit_code, 128 + SIGTERM) << (*old_agent)->Log();
  } else {
    EXPECT_EQ(old_exit->signal, SIGTERM);
  }
  const std::string new_pid = in_container({"cat", daemon::kRemotePidFile});
  EXPECT_NE(new_pid, old_pid);
  EXPECT_EQ(in_container({"cat", "/proc/" + new_pid + "/comm"}), "fleet-agent");
  EXPECT_EQ(in_container({daemon::kRemoteAgent, "--version"}), package_.version);
  EXPECT_TRUE(client_->Status().ok());

  // Idempotent: one command, nothing pushed or started.
  auto again = Ensure();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->previous_version, package_.version);
  EXPECT_FALSE(again->pushed);
  EXPECT_FALSE(again->started);
  EXPECT_THAT(again->steps, ElementsAre("status", "version"));
  EXPECT_EQ(in_container({"cat", daemon::kRemotePidFile}), new_pid);
  // The host keeps no staging directory.
  ASSERT_THAT(r->stage_dir, ::testing::EndsWith("/.gpu-fleet-bootstrap/201"));
  auto left = ssh_->Run({"test", "-e", r->stage_dir}, "", absl::Seconds(30));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->exit_status, 1);
}

void BootstrapTest::FailedStepNamesTheHostTheContainerAndTheStep() {
  spec_.ctid = "299";  // no such container on the host
  auto r = Ensure();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("host pve1, container 299: agent bootstrap, step status: "));
  EXPECT_THAT(r.status().message(), HasSubstr("299.conf' does not exist"));
  // A missing certificate is named at the stage step, before anything reaches the container.
  spec_.ctid = "201";
  spec_.agent_key_file = dir_.Join("missing.key");
  r = Ensure();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("container 201: agent bootstrap, step stage: "));
  EXPECT_THAT(r.status().message(), HasSubstr("missing.key"));
  EXPECT_NE(access((host_->rootfs("201") + daemon::kRemoteAgent).c_str(), F_OK), 0);
}

void BootstrapTest::HostileArgumentsReachAProgramInTheContainerVerbatim() {
  const std::vector<std::string> hostile = {
      "two words", "it's", "\"double\"", "a;b",   "$(touch /tmp/pwned)", "`id`", "new\nline",
      "*",         "-n",   "",           "$HOME", "back\\slash",         "|&<>"};
  std::vector<std::string> argv = {"printf", "[%s]\\n"};
  argv.insert(argv.end(), hostile.begin(), hostile.end());
  auto r = ssh_->Run(*daemon::PctExecArgv("201", argv, false), "", absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  std::string want;
  for (const std::string& h : hostile) want += "[" + h + "]\n";
  EXPECT_EQ(r->out, want);
  EXPECT_NE(access((host_->rootfs("201") + "/tmp/pwned").c_str(), F_OK), 0);
  EXPECT_NE(access("/tmp/pwned", F_OK), 0);
}

TEST_F(BootstrapTest, AnOlderAgentIsReplacedInPlaceAndASecondRunChangesNothing) {
  OlderAgentReplacedInPlaceAndASecondRunChangesNothing();
}

TEST_F(BootstrapTest, AFailedStepNamesTheHostTheContainerAndTheStep) {
  FailedStepNamesTheHostTheContainerAndTheStep();
}

TEST_F(BootstrapTest, HostileArgumentsReachAProgramInTheContainerVerbatim) {
  HostileArgumentsReachAProgramInTheContainerVerbatim();
}

// The same bootstrap against a real LXC container (issue 17): `pct` is tests/sim/pct-lxc, so
// `pct exec` is lxc-attach and `pct push` writes into the running container, with what LXC does
// that a chroot does not (the environment cleared or kept, lxc-attach and the descriptors of a
// detached child). A privileged container without systemd; skipped without LXC.
class LxcBootstrapTest : public BootstrapTest {
 protected:
  std::string LxcCache() const override { return fleet::LxcCache(); }
  // A fresh agent pushed and started (by systemd when `systemd`): pct exec of the start returns
  // while it keeps running, and it has none of the SSH session's environment.
  void TheAgentOutlivesPctExecWithoutTheHostsEnvironment(bool systemd);

  void SetUp() override {
    // An unprivileged container's root (100000) walks this folder to its overlay's layers.
    chmod(dir_.path().c_str(), 0755);
    if (std::string why = LxcSkipReason(); !why.empty()) GTEST_SKIP() << why;
    BootstrapTest::SetUp();
  }
};

TEST_F(LxcBootstrapTest, AnOlderAgentIsReplacedInPlaceAndASecondRunChangesNothing) {
  OlderAgentReplacedInPlaceAndASecondRunChangesNothing();
}

TEST_F(LxcBootstrapTest, AFailedStepNamesTheHostTheContainerAndTheStep) {
  FailedStepNamesTheHostTheContainerAndTheStep();
}

TEST_F(LxcBootstrapTest, HostileArgumentsReachAProgramInTheContainerVerbatim) {
  HostileArgumentsReachAProgramInTheContainerVerbatim();
}

// A fresh container: the agent is pushed and started; `pct exec` of the start returns while the
// detached agent keeps running (lxc-attach's reader, sshd, sees end-of-file only once every
// process holding the command's output has closed it), and the agent has none of the SSH
// session's environment.
void LxcBootstrapTest::TheAgentOutlivesPctExecWithoutTheHostsEnvironment(bool systemd) {
  auto r = Ensure();
  if (!r.ok()) {
    for (std::vector<std::string> argv :
         {std::vector<std::string>{"tail", "-n", "20", daemon::kRemoteLog},
          std::vector<std::string>{"journalctl", "--no-pager", "-n", "30", "-u",
                                   "gpu-fleet-agent.service"}}) {
      auto out = ssh_->Run(*daemon::PctExecArgv("201", argv, false), "", absl::Seconds(30));
      if (out.ok())
        std::fprintf(stderr, "%s\n%s%s\n", argv[0].c_str(), out->out.c_str(), out->err.c_str());
    }
  }
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < r->steps.size() && i < r->step_times.size(); ++i) {
    std::fprintf(stderr, "step %s: %s\n", r->steps[i].c_str(),
                 absl::FormatDuration(r->step_times[i]).c_str());
  }
  EXPECT_TRUE(r->pushed);
  EXPECT_TRUE(r->started);
  EXPECT_EQ(r->systemd, systemd);
  EXPECT_TRUE(client_->Status().ok());
  auto run = [&](const std::vector<std::string>& argv) {
    auto out = ssh_->Run(*daemon::PctExecArgv("201", argv, false), "", absl::Seconds(30));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->out : std::string();
  };
  // Under systemd the unit's main process; else the pid file of the detached agent.
  const std::string pid = std::string(absl::StripAsciiWhitespace(
      systemd ? run({"systemctl", "show", "--value", "-p", "MainPID", "gpu-fleet-agent.service"})
              : run({"cat", daemon::kRemotePidFile})));
  ASSERT_FALSE(pid.empty());
  // Inside the container the agent is a process of its own, still running.
  EXPECT_EQ(absl::StripAsciiWhitespace(run({"cat", "/proc/" + pid + "/comm"})), "fleet-agent");
  std::string environ = run({"cat", "/proc/" + pid + "/environ"});
  std::replace(environ.begin(), environ.end(), '\0', '\n');
  // sshd gives the session SSH_CONNECTION and SSH_CLIENT; pct runs in that session.
  EXPECT_THAT(environ, ::testing::Not(HasSubstr("SSH_CONNECTION=")));
  EXPECT_THAT(environ, ::testing::Not(HasSubstr("SSH_CLIENT=")));
  EXPECT_THAT(environ, ::testing::Not(HasSubstr("USER=")));
}

TEST_F(LxcBootstrapTest, TheDetachedAgentOutlivesPctExecWithoutTheHostsEnvironment) {
  TheAgentOutlivesPctExecWithoutTheHostsEnvironment(/*systemd=*/false);
}

// The SSH connection cut while `pct exec` starts the agent (issue 17): the host's pct holds the
// first start (marker cut.reached in its folder, then waits on the fifo cut.fifo), the test kills
// sshd's session processes, which ends the connection, and lets the held command go on without
// its caller, as a command outlives a killed lxc-attach (cut.done once it ended). Whatever the
// order of that orphaned start and the next bootstrap, one agent runs in the end.
class LxcCutBootstrapTest : public LxcBootstrapTest {
 protected:
  void SetUp() override {
    LxcBootstrapTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    sbin_ = host_->dir() + "/sbin";
    std::filesystem::rename(sbin_ + "/pct", sbin_ + "/pct.real");
    // (The folder is the host's /usr/local/sbin: the script finds its files next to itself.)
    dir_.WriteFile("pve/sbin/pct", R"(#!/bin/sh
here=$(dirname "$0")
case " $* " in
  *" --detach "*)
    if mkdir "$here/cut.held" 2>/dev/null; then
      : > "$here/cut.reached"
      read -r _ < "$here/cut.fifo"
      "$here/pct.real" "$@" > /dev/null 2>&1
      echo $? > "$here/cut.done"
      exit 0
    fi ;;
esac
exec "$here/pct.real" "$@"
)");
    chmod((sbin_ + "/pct").c_str(), 0755);
    ASSERT_EQ(mkfifo((sbin_ + "/cut.fifo").c_str(), 0600), 0);
  }

  // Starts a bootstrap, and cuts its connection once its start command is held on the host.
  void StartAndCut() {
    auto first = std::async(std::launch::async, [this] { return Ensure(); });
    const bool reached =
        testing::Eventually([&] { return access((sbin_ + "/cut.reached").c_str(), F_OK) == 0; },
                            std::chrono::seconds(60));
    // sshd's per-connection processes are the listener's children: killed, the TCP connection
    // ends (as a host that drops it), the command they ran stays. The listener is this host's
    // sshd (its command line names this host's sshd_config), not a process that took its pid.
    const std::string listener =
        std::string(absl::StripAsciiWhitespace(testing::ReadFile(host_->dir() + "/sshd.pid")));
    int killed = 0;
    if (reached && absl::StrContains(testing::ReadFile("/proc/" + listener + "/cmdline"),
                                     host_->dir() + "/sshd_config")) {
      for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string stat = testing::ReadFile(entry.path().string() + "/stat");
        const size_t close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
        int pid = 0;
        if (fields.size() > 1 && fields[1] == listener &&
            absl::SimpleAtoi(entry.path().filename().string(), &pid)) {
          killed += kill(pid, SIGKILL) == 0 ? 1 : 0;
        }
      }
    }
    EXPECT_TRUE(reached) << "the start was never held";
    EXPECT_GE(killed, 1);
    // Bounded: a bootstrap the cut did not end would wait on the held start for ever.
    if (first.wait_for(kDeadline) != std::future_status::ready) {
      ADD_FAILURE() << "the bootstrap did not end when its connection was cut";
      ReleaseHeldStart();
    }
    cut_ = first.get();
  }

  // Lets the held start go on, and waits until it ended.
  void ReleaseHeldStart() {
    // Non-blocking: no reader (the held start gone) is ENXIO, not a wait for ever.
    int fd = -1;
    ASSERT_TRUE(testing::Eventually(
        [&] {
          fd = open((sbin_ + "/cut.fifo").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
          return fd >= 0;
        },
        std::chrono::seconds(10)))
        << "nothing holds the start: " << strerror(errno);
    EXPECT_EQ(write(fd, "go\n", 3), 3);
    close(fd);
    ASSERT_TRUE(
        testing::Eventually([&] { return access((sbin_ + "/cut.done").c_str(), F_OK) == 0; },
                            std::chrono::seconds(60)));
  }

  void Reconnect() {
    auto ssh = daemon::SshSession::Connect(Ssh(*host_, creds_, "pve1"));
    ASSERT_TRUE(ssh.ok()) << ssh.status();
    ssh_ = *std::move(ssh);
  }

  size_t Agents() const { return AgentProcesses(spec_.listen).size(); }

  std::string sbin_;
  absl::StatusOr<daemon::BootstrapResult> cut_;
};

TEST_F(LxcCutBootstrapTest, AStartThatOutlivesItsConnectionIsFoundByTheNextBootstrap) {
  StartAndCut();
  ASSERT_FALSE(cut_.ok());
  EXPECT_THAT(cut_.status().message(), HasSubstr("step start"));
  ReleaseHeldStart();
  EXPECT_EQ(absl::StripAsciiWhitespace(testing::ReadFile(sbin_ + "/cut.done")), "0");
  // The orphaned start started the agent; the next bootstrap finds it running and up to date.
  Reconnect();
  auto r = Ensure();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->started);
  EXPECT_THAT(r->steps, ElementsAre("status", "version"));
  EXPECT_EQ(Agents(), 1u);
  EXPECT_TRUE(client_->Status().ok());
}

TEST_F(LxcCutBootstrapTest, AStartThatOutlivesItsConnectionAndTheNextBootstrapLeaveOneAgent) {
  StartAndCut();
  ASSERT_FALSE(cut_.ok());
  // The next bootstrap while the cut one's start is still held: it starts an agent of its own.
  Reconnect();
  auto r = Ensure();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->started);
  EXPECT_EQ(Agents(), 1u);
  // Then the orphaned start runs: its agent replaces the running one (--replace), never a second.
  ReleaseHeldStart();
  EXPECT_EQ(Agents(), 1u);
  EXPECT_TRUE(client_->Answers(absl::Seconds(30)).ok());
  auto again = Ensure();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->started);
  EXPECT_EQ(Agents(), 1u);
}

// An unprivileged container (0 mapped to 100000): what pct push writes is the container's root's.
class LxcUnprivilegedBootstrapTest : public LxcBootstrapTest {
 protected:
  std::vector<std::string> LxcOptions() const override { return {"--unprivileged", "201"}; }
  bool MaySkipWhenLxcStartFails() const override { return true; }
};

TEST_F(LxcUnprivilegedBootstrapTest, TheDetachedAgentOutlivesPctExecWithoutTheHostsEnvironment) {
  TheAgentOutlivesPctExecWithoutTheHostsEnvironment(/*systemd=*/false);
  struct stat st {};
  ASSERT_EQ(stat((host_->rootfs("201") + daemon::kRemoteAgent).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 100000u);
}

TEST_F(LxcUnprivilegedBootstrapTest, HostileArgumentsReachAProgramInTheContainerVerbatim) {
  HostileArgumentsReachAProgramInTheContainerVerbatim();
}

// A container whose PID 1 is systemd (most Proxmox containers): the bootstrap installs and
// starts a unit instead. It found that a health check failing fast never reached an agent that
// refused the first connection (systemd starts it after `systemctl restart` returns): the channel's
// later attempts were left to gRPC's backup poller and their TLS handshakes timed out
// (GrpcAgentClient::Answers waits for the connection now).
class LxcSystemdBootstrapTest : public LxcBootstrapTest {
 protected:
  std::vector<std::string> LxcOptions() const override { return {"--systemd", "201"}; }
  bool MaySkipWhenLxcStartFails() const override { return true; }
};

TEST_F(LxcSystemdBootstrapTest, TheAgentRunsUnderSystemdWithoutTheHostsEnvironment) {
  TheAgentOutlivesPctExecWithoutTheHostsEnvironment(/*systemd=*/true);
}

}  // namespace
}  // namespace fleet

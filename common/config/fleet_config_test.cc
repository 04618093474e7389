#include "common/config/fleet_config.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/config_duration.h"
#include "common/config/desired_server.h"
#include "common/config/yaml_message_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace fleet::config {
namespace {

using ::fleet::v1::Channel;
using ::fleet::v1::FleetConfig;
using ::fleet::v1::Policy;
using ::fleet::v1::Reach;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// Line numbers in the expectations below count from the first line of each literal.
constexpr char kMinimal[] = R"(hosts:
  - name: local
    containers:
      - ctid: sim
        gpus: [0, 1]
        template: sglang
        base_port: 30000
templates:
  - name: sglang
    model: /models/m
    argv: [/venv/bin/python, -m, sglang.launch_server, --model-path, "{model}", --port, "{port}"]
)";

FleetConfig Parse(std::string_view yaml) {
  absl::StatusOr<FleetConfig> config = ParseFleetConfig(yaml, "fleet.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : FleetConfig();
}

// The error message of a config that must not load.
std::string ErrorOf(std::string_view yaml) {
  absl::StatusOr<FleetConfig> config = ParseFleetConfig(yaml, "fleet.yaml");
  EXPECT_FALSE(config.ok()) << "loaded:\n" << yaml;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

// kMinimal with `from` replaced by `to` (which must occur once).
std::string Edit(std::string_view from, std::string_view to, std::string yaml = kMinimal) {
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) yaml.replace(at, from.size(), to);
  return yaml;
}

absl::Duration D(const google::protobuf::Duration& d) { return FromProtoDuration(d); }

// --- valid configs ---------------------------------------------------------------------------

TEST(FleetConfig, MinimalConfigGetsEveryDefault) {
  const FleetConfig config = Parse(kMinimal);
  ASSERT_EQ(config.hosts_size(), 1);
  const auto& host = config.hosts(0);
  EXPECT_EQ(host.reach().kind(), Reach::LOCAL);
  const auto& container = host.containers(0);
  EXPECT_EQ(container.ctid(), "sim");
  EXPECT_THAT(container.gpus(), ElementsAre(0, 1));
  EXPECT_EQ(container.channel().kind(), Channel::LOOPBACK);
  // The agent's unix socket under deploy/fleet-agent.service: no plaintext TCP by default.
  EXPECT_EQ(container.channel().address(), "unix:/var/lib/gpu-fleet-agent/agent.sock");
  EXPECT_EQ(container.channel().port(), kDefaultAgentPort);
  EXPECT_EQ(container.policy(), "default");
  const auto& tmpl = config.templates(0);
  EXPECT_EQ(tmpl.engine(), "sglang");
  EXPECT_EQ(tmpl.log_path(), "/workspace/sglang_logs/sglang_gpu{gpu}.log");
  EXPECT_EQ(tmpl.readiness().path(), "/health_generate");
  EXPECT_FALSE(tmpl.readiness().completion_check());
  // No policy "default" in the file: the built-in one is added.
  ASSERT_EQ(config.policies_size(), 1);
  const Policy& policy = config.policies(0);
  EXPECT_EQ(policy.name(), "default");
  EXPECT_EQ(D(policy.stall_timeout()), absl::Minutes(10));
  EXPECT_EQ(D(policy.startup_deadline()), absl::Minutes(90));
  EXPECT_EQ(policy.max_attempts(), 8);
  EXPECT_EQ(D(policy.backoff_initial()), absl::Seconds(10));
  EXPECT_EQ(D(policy.backoff_max()), absl::Minutes(5));
  EXPECT_EQ(policy.remediation(), Policy::AUTO);
  EXPECT_EQ(policy.max_fixes_per_cause(), 3);
  EXPECT_TRUE(policy.canary());
  EXPECT_FALSE(policy.allow_fallbacks());
  EXPECT_TRUE(policy.allowed_actions().empty());
}

TEST(FleetConfig, ReadsEveryKindOfField) {
  const FleetConfig config = Parse(R"(hosts:
  - name: pve1
    reach:
      kind: ssh
      address: 10.0.0.5
      port: 2222
      user: admin
      identity_file: /root/.ssh/id_ed25519
      known_hosts: /var/lib/gpu-fleet/known_hosts
      connect_timeout: 1.5
    containers:
      - ctid: 200
        channel:
          kind: ssh-tunnel
          port: 50200
          ca_file: ca.crt
          cert_file: fleetd.crt
          key_file: fleetd.key
          agent_cert_file: agent-200.crt
          agent_key_file: agent-200.key
          tls_name: agent-200
        gpus:
          - 2
          - 3
        template: vllm
        policy: fast
        base_port: 8000
        env: {HF_HOME: /hf, EMPTY: ""}
        tools:
          pip: [/venv/bin/python, -m, pip]
          apt_get: [apt-get]
          nvidia_smi: [/sim/bin/nvidia-smi]
          venv: /venv
          pip_options: [--index-url, "https://download.pytorch.org/whl/cu130"]
          jit_cache_roots: [/root/.cache/flashinfer]
          toolkit_roots: [/usr/local/cuda]
templates:
  - name: vllm
    engine: vllm
    argv: [vllm, serve, "{model}", --port, "{port}"]
    env:
      A: "1"
    workdir: /work
    log_path: /logs/vllm-{gpu}.log
    model: /models/llama
    readiness:
      path: /health
      interval: 500ms
policies:
  - name: fast
    stall_timeout: 90s
    startup_deadline: 1h30m
    max_attempts: 3
    backoff_initial: 1s
    backoff_max: 1m
    remediation: ask
    allowed_actions: [set_env, pip_install]
    max_fixes_per_cause: 2
    canary: false
    allow_fallbacks: true
    preflight_attempts: 3
    preflight_failure: give_up
)");
  const auto& reach = config.hosts(0).reach();
  EXPECT_EQ(reach.kind(), Reach::SSH);
  EXPECT_EQ(reach.address(), "10.0.0.5");
  EXPECT_EQ(reach.port(), 2222);
  EXPECT_EQ(reach.user(), "admin");
  EXPECT_EQ(reach.identity_file(), "/root/.ssh/id_ed25519");
  EXPECT_EQ(reach.known_hosts(), "/var/lib/gpu-fleet/known_hosts");
  EXPECT_EQ(D(reach.connect_timeout()), absl::Milliseconds(1500));
  const auto& container = config.hosts(0).containers(0);
  EXPECT_EQ(container.ctid(), "200");
  EXPECT_EQ(container.channel().kind(), Channel::SSH_TUNNEL);
  EXPECT_EQ(container.channel().port(), 50200);
  EXPECT_EQ(container.channel().key_file(), "fleetd.key");
  EXPECT_THAT(container.gpus(), ElementsAre(2, 3));
  EXPECT_EQ(container.policy(), "fast");
  EXPECT_THAT(container.env(), UnorderedElementsAre(Pair("HF_HOME", "/hf"), Pair("EMPTY", "")));
  EXPECT_THAT(container.tools().pip(), ElementsAre("/venv/bin/python", "-m", "pip"));
  EXPECT_THAT(container.tools().nvidia_smi(), ElementsAre("/sim/bin/nvidia-smi"));
  EXPECT_EQ(container.tools().venv(), "/venv");
  EXPECT_THAT(container.tools().pip_options(),
              ElementsAre("--index-url", "https://download.pytorch.org/whl/cu130"));
  const auto& tmpl = config.templates(0);
  EXPECT_EQ(tmpl.engine(), "vllm");
  EXPECT_EQ(tmpl.workdir(), "/work");
  EXPECT_EQ(tmpl.readiness().path(), "/health");
  EXPECT_TRUE(tmpl.readiness().completion_check());  // vLLM's default, not written
  EXPECT_EQ(D(tmpl.readiness().interval()), absl::Milliseconds(500));
  ASSERT_EQ(config.policies_size(), 2);  // "fast", then the built-in "default"
  const Policy& fast = config.policies(0);
  EXPECT_EQ(D(fast.stall_timeout()), absl::Seconds(90));
  EXPECT_EQ(D(fast.startup_deadline()), absl::Minutes(90));
  EXPECT_EQ(fast.max_attempts(), 3);
  EXPECT_EQ(D(fast.backoff_initial()), absl::Seconds(1));
  EXPECT_EQ(D(fast.backoff_max()), absl::Minutes(1));
  EXPECT_EQ(fast.remediation(), Policy::ASK);
  EXPECT_THAT(fast.allowed_actions(), ElementsAre("set_env", "pip_install"));
  EXPECT_EQ(fast.max_fixes_per_cause(), 2);
  EXPECT_FALSE(fast.canary());
  EXPECT_TRUE(fast.allow_fallbacks());
  EXPECT_EQ(fast.preflight_attempts(), 3);
  EXPECT_EQ(fast.preflight_failure(), Policy::GIVE_UP);
  EXPECT_EQ(config.policies(1).name(), "default");
}

TEST(FleetConfig, SshHostGetsPortUserAndTunnelDefaults) {
  const FleetConfig config =
      Parse(Edit("  - name: local\n", R"(  - name: pve1
    reach: {kind: ssh, address: pve1.lan}
)",
                 Edit("      - ctid: sim\n", "      - ctid: 201\n",
                      Edit("        base_port: 30000\n", R"(        base_port: 30000
        channel: {ca_file: /pki/ca.crt, cert_file: /pki/d.crt, key_file: /pki/d.key,
                  agent_cert_file: /pki/a.crt, agent_key_file: /pki/a.key, tls_name: ct201}
)"))));
  EXPECT_EQ(config.hosts(0).reach().port(), 22);
  EXPECT_EQ(config.hosts(0).reach().user(), "root");
  EXPECT_EQ(config.hosts(0).containers(0).channel().kind(), Channel::SSH_TUNNEL);
}

TEST(FleetConfig, DefinedDefaultPolicyKeepsItsValuesAndGetsTheRest) {
  const FleetConfig config = Parse(absl::StrCat(kMinimal, R"(policies:
  - name: default
    stall_timeout: 20m
    max_attempts: 2
)"));
  ASSERT_EQ(config.policies_size(), 1);
  const Policy& policy = config.policies(0);
  EXPECT_EQ(D(policy.stall_timeout()), absl::Minutes(20));
  EXPECT_EQ(policy.max_attempts(), 2);
  EXPECT_EQ(D(policy.startup_deadline()), absl::Minutes(90));
  EXPECT_TRUE(policy.canary());
  EXPECT_EQ(policy.remediation(), Policy::AUTO);
}

TEST(FleetConfig, NullValuesAreLikeLeftOutKeys) {
  const FleetConfig config = Parse(absl::StrCat(Edit("        base_port: 30000\n",
                                                     "        base_port: 30000\n        env:\n"
                                                     "        channel: ~\n"),
                                                "policies:\n"));
  EXPECT_TRUE(config.hosts(0).containers(0).env().empty());
  EXPECT_EQ(config.hosts(0).containers(0).channel().kind(), Channel::LOOPBACK);
}

TEST(FleetConfig, BracesThatAreNotPlaceholdersAreKept) {
  const FleetConfig config = Parse(
      Edit(R"(--port, "{port}"])",
           R"(--port, "{port}", --json-model-override-args, '{"rope_scaling": {"factor": 4}}'])"));
  EXPECT_THAT(config.templates(0).argv(), Contains(R"({"rope_scaling": {"factor": 4}})"));
}

// --- schema errors: each with its file:line and field path ------------------------------------

TEST(FleetConfigErrors, BadIntegerInAList) {
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: [0, 1, x]")),
            "fleet.yaml:5: hosts[0].containers[0].gpus[2]: expected an integer, got 'x'");
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus:\n          - 0\n          - 1.5")),
            "fleet.yaml:7: hosts[0].containers[0].gpus[1]: expected an integer, got '1.5'");
}

TEST(FleetConfigErrors, UnknownKeyNamesTheKnownOnesAndSuggests) {
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpu: [0, 1]")),
            "fleet.yaml:5: hosts[0].containers[0]: unknown field 'gpu' (did you mean 'gpus'?); "
            "Container has: ctid, channel, gpus, template, policy, base_port, env, env_from_file, "
            "tools, server_address, servers");
  EXPECT_EQ(ErrorOf(Edit("base_port:", "basePort:")),
            "fleet.yaml:7: hosts[0].containers[0]: unknown field 'basePort' (did you mean "
            "'base_port'?); Container has: ctid, channel, gpus, template, policy, base_port, env, "
            "env_from_file, tools, server_address, servers");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "servers: []\n")),
            "fleet.yaml:12: unknown field 'servers'; FleetConfig has: hosts, templates, policies, "
            "notify");
}

TEST(FleetConfigErrors, WrongKinds) {
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: {a: 1}")),
            "fleet.yaml:5: hosts[0].containers[0].gpus: expected a list of integers, got a map");
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: 3")),
            "fleet.yaml:5: hosts[0].containers[0].gpus: expected a list of integers, got '3'");
  EXPECT_EQ(ErrorOf(Edit("  - name: local\n", "  - name: local\n    reach: [local]\n")),
            "fleet.yaml:3: hosts[0].reach: expected a map of Reach fields, got a list");
  EXPECT_EQ(ErrorOf(Edit("        template: sglang", "        template: [sglang]")),
            "fleet.yaml:6: hosts[0].containers[0].template: expected a string, got a list");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m", "    env: [A=1]")),
            "fleet.yaml:10: templates[0].env: expected a map, got a list");
  EXPECT_EQ(ErrorOf("- hosts\n"), "fleet.yaml:1: expected a map of FleetConfig fields, got a list");
  EXPECT_EQ(
      ErrorOf(Edit("    containers:\n      - ctid: sim\n        gpus: [0, 1]\n        template: "
                   "sglang\n        base_port: 30000\n",
                   "    containers: {}\n")),
      "fleet.yaml:3: hosts[0].containers: expected a list of Container entries, got a map");
}

TEST(FleetConfigErrors, DuplicateKeys) {
  EXPECT_EQ(
      ErrorOf(Edit("        base_port: 30000\n", "        base_port: 30000\n        gpus: [2]\n")),
      "fleet.yaml:8: hosts[0].containers[0].gpus: duplicate key (first at line 5)");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "    env: {A: '1', B: '2', A: '3'}\n")),
            "fleet.yaml:10: templates[0].env.A: duplicate key (first at line 10)");
}

TEST(FleetConfigErrors, OutOfRangeIntegers) {
  EXPECT_EQ(ErrorOf(Edit("base_port: 30000", "base_port: 99999999999")),
            "fleet.yaml:7: hosts[0].containers[0].base_port: out of range: '99999999999' is not "
            "in -2147483648..2147483647");
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: [0, 99999999999999999999999]")),
            "fleet.yaml:5: hosts[0].containers[0].gpus[1]: out of range: "
            "'99999999999999999999999' is not in -2147483648..2147483647");
}

TEST(FleetConfigErrors, BadEnumNames) {
  EXPECT_EQ(ErrorOf(Edit("  - name: local\n", "  - name: local\n    reach: {kind: sshh}\n")),
            "fleet.yaml:3: hosts[0].reach.kind: expected one of local, ssh, got 'sshh' (did you "
            "mean 'ssh'?)");
  EXPECT_EQ(ErrorOf(Edit("  - name: local\n", "  - name: local\n    reach: {kind: LOCAL}\n")),
            "fleet.yaml:3: hosts[0].reach.kind: expected one of local, ssh, got 'LOCAL' (did you "
            "mean 'local'?)");
  EXPECT_EQ(
      ErrorOf(Edit("  - name: local\n", "  - name: local\n    reach: {kind: kind_unspecified}\n")),
      "fleet.yaml:3: hosts[0].reach.kind: expected one of local, ssh, got "
      "'kind_unspecified'");
  EXPECT_EQ(
      ErrorOf(absl::StrCat(kMinimal, "policies:\n  - name: default\n    remediation: manual\n")),
      "fleet.yaml:14: policies[0].remediation: expected one of auto, ask, off, got 'manual'");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {kind: tunnel}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel.kind: expected one of loopback, "
            "direct, ssh_tunnel, got 'tunnel'");
}

TEST(FleetConfigErrors, BadDurationsAndBooleans) {
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal,
                                 "policies:\n  - name: default\n    stall_timeout: 10 minutes\n")),
            "fleet.yaml:14: policies[0].stall_timeout: expected a duration such as 90s, 10m, "
            "1h30m, 500ms or a number of seconds, got '10 minutes'");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "policies:\n  - name: default\n    backoff_max: -5s\n")),
            "fleet.yaml:14: policies[0].backoff_max: a duration cannot be negative, got '-5s'");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "policies:\n  - name: default\n    canary: yes\n")),
            "fleet.yaml:14: policies[0].canary: expected true or false, got 'yes'");
  EXPECT_EQ(ErrorOf(absl::StrCat(
                kMinimal, "policies:\n  - name: default\n    stall_timeout: {seconds: 5}\n")),
            "fleet.yaml:14: policies[0].stall_timeout: expected a duration, got a map");
}

TEST(FleetConfigErrors, NullInsideAListOrAMap) {
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: [0, ~]")),
            "fleet.yaml:5: hosts[0].containers[0].gpus[1]: expected an integer, got nothing");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "    env:\n      HF_HOME:\n")),
            "fleet.yaml:11: templates[0].env.HF_HOME: expected a string, got nothing (write \"\" "
            "for an empty string)");
}

TEST(FleetConfigErrors, MalformedYamlGivesTheParserLine) {
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: [0, 1")),
            "fleet.yaml:6: malformed YAML: end of sequence flow not found");
  EXPECT_EQ(ErrorOf("hosts:\n  - name: a\n\tcontainers: []\n"),
            "fleet.yaml:3: malformed YAML: illegal tab when looking for indentation");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "---\nhosts: []\n")),
            "fleet.yaml:13: expected one YAML document, found 2 (the second starts here)");
}

TEST(FleetConfigErrors, MergeKeysAreNotSupported) {
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "    <<: {model: /models/m}\n")),
            "fleet.yaml:10: templates[0]: YAML merge keys ('<<') are not supported: write the "
            "fields out");
}

TEST(FleetConfig, TrailingEmptyDocumentIsIgnoredAndAnchorsWork) {
  const FleetConfig config = Parse(
      Edit("        base_port: 30000\n", "        base_port: 30000\n        env: &env {A: '1'}\n",
           Edit("    model: /models/m\n", "    model: /models/m\n    env: *env\n",
                absl::StrCat(kMinimal, "---\n"))));
  EXPECT_THAT(config.templates(0).env(), UnorderedElementsAre(Pair("A", "1")));
}

TEST(FleetConfigErrors, ReportsEverySchemaErrorInLineOrder) {
  EXPECT_EQ(
      ErrorOf(Edit("gpus: [0, 1]", "gpus: [x, 1]",
                   Edit("base_port: 30000", "base_port: p", Edit("name: local", "nme: local")))),
      "fleet.yaml:2: hosts[0]: unknown field 'nme' (did you mean 'name'?); Host has: name, "
      "reach, containers\n"
      "fleet.yaml:5: hosts[0].containers[0].gpus[0]: expected an integer, got 'x'\n"
      "fleet.yaml:7: hosts[0].containers[0].base_port: expected an integer, got 'p'");
}

// --- semantic errors ---------------------------------------------------------------------------

TEST(FleetConfigErrors, NoHosts) {
  EXPECT_EQ(ErrorOf(""), "fleet.yaml:1: hosts: at least one host is required");
  EXPECT_EQ(ErrorOf("hosts: []\n"), "fleet.yaml:1: hosts: at least one host is required");
}

TEST(FleetConfigErrors, DuplicateAndInvalidNames) {
  const std::string two_hosts = Edit("templates:\n", R"(  - name: local
    containers: []
templates:
)");
  EXPECT_EQ(ErrorOf(two_hosts),
            "fleet.yaml:8: hosts[1].name: duplicate host name 'local' (first at line 2)");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n", R"(        base_port: 30000
      - ctid: sim
        gpus: [2]
        template: sglang
        base_port: 31000
        channel: {address: "unix:/run/agent2.sock"}
)")),
            "fleet.yaml:8: hosts[0].containers[1].ctid: duplicate container name 'sim' (first at "
            "line 4)");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "  - name: sglang\n    argv: [x]\n")),
            "fleet.yaml:12: templates[1].name: duplicate template name 'sglang' (first at line 9)");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "policies:\n  - name: p\n  - name: p\n")),
            "fleet.yaml:14: policies[1].name: duplicate policy name 'p' (first at line 13)");
  EXPECT_EQ(ErrorOf(Edit("name: local", "name: a/b")),
            "fleet.yaml:2: hosts[0].name: invalid host name 'a/b': use letters, digits, '.', '_', "
            "'-'");
  EXPECT_EQ(ErrorOf(Edit("      - ctid: sim\n", "      - gpus: [3]\n")),
            "fleet.yaml:5: hosts[0].containers[0].gpus: duplicate key (first at line 4)");
  EXPECT_EQ(ErrorOf(Edit("      - ctid: sim\n", "      - ctid: ''\n")),
            "fleet.yaml:4: hosts[0].containers[0].ctid: a container needs a name");
}

TEST(FleetConfigErrors, TemplateAndPolicyMustExist) {
  EXPECT_EQ(ErrorOf(Edit("template: sglang", "template: sglan")),
            "fleet.yaml:6: hosts[0].containers[0].template: no template named 'sglan' (did you "
            "mean 'sglang'?); templates: sglang");
  EXPECT_EQ(ErrorOf(Edit("        template: sglang\n", "")),
            "fleet.yaml:4: hosts[0].containers[0].template: required: the server template this "
            "container runs; templates: sglang");
  EXPECT_EQ(ErrorOf(Edit("        template: sglang\n",
                         "        template: sglang\n        policy: fast\n")),
            "fleet.yaml:7: hosts[0].containers[0].policy: no policy named 'fast'; policies: "
            "default");
}

TEST(FleetConfigErrors, Gpus) {
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: []")),
            "fleet.yaml:5: hosts[0].containers[0].gpus: at least one GPU index is required (here, "
            "or a server's in servers)");
  EXPECT_EQ(ErrorOf(Edit("        gpus: [0, 1]\n", "")),
            "fleet.yaml:4: hosts[0].containers[0].gpus: at least one GPU index is required (here, "
            "or a server's in servers)");
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus:\n          - 1\n          - 0\n          - 1")),
            "fleet.yaml:8: hosts[0].containers[0].gpus[2]: GPU 1 is listed twice (first at line "
            "6)");
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: [-1]")),
            "fleet.yaml:5: hosts[0].containers[0].gpus[0]: GPU index -1 is outside 0..65535");
}

TEST(FleetConfigErrors, Ports) {
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n", "")),
            "fleet.yaml:4: hosts[0].containers[0].base_port: required: the server for GPU n "
            "listens on base_port + n");
  EXPECT_EQ(ErrorOf(Edit("gpus: [0, 1]", "gpus: [0, 7]", Edit("30000", "65530"))),
            "fleet.yaml:7: hosts[0].containers[0].base_port: base_port 65530 + gpu 7 = 65537 is "
            "outside 1..65535");
  EXPECT_EQ(ErrorOf(Edit("base_port: 30000",
                         "base_port: 30000\n        channel: {address: 127.0.0.1, port: 30001, "
                         "ca_file: c, cert_file: d, key_file: k, tls_name: sim}")),
            "fleet.yaml:7: hosts[0].containers[0].base_port: port 30001 (GPU 1 of container 'sim') "
            "is also used by the agent of container 'sim' (line 8)");
  // Two loopback TCP containers share the daemon's loopback: the second agent needs its own port.
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n", R"(        base_port: 30000
        channel: {address: 127.0.0.1, ca_file: c, cert_file: d, key_file: k, tls_name: sim}
      - ctid: sim2
        channel: {address: 127.0.0.1, ca_file: c, cert_file: d, key_file: k, tls_name: sim2}
        gpus: [0]
        template: sglang
        base_port: 31000
)")),
            "fleet.yaml:10: hosts[0].containers[1].channel.port: port 50151 (the agent of "
            "container 'sim2') is also used by the agent of container 'sim' (line 8)");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {port: 70000}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel.port: port 70000 is outside 1..65535");
}

TEST(FleetConfigErrors, AContainerOnAnSshHostIsAProxmoxIdWithTheAgentsCertificate) {
  EXPECT_EQ(
      ErrorOf(Edit("  - name: local\n", "  - name: pve1\n    reach: {kind: ssh, address: h}\n",
                   Edit("        base_port: 30000\n",
                        "        base_port: 30000\n        channel: {ca_file: c, cert_file: "
                        "d, key_file: k, tls_name: ct}\n"))),
      "fleet.yaml:5: hosts[0].containers[0].ctid: a container on an ssh host is a Proxmox "
      "container id (100, 201, ...), got 'sim'\n"
      "fleet.yaml:9: hosts[0].containers[0].channel: a container on an ssh host gets its "
      "agent from fleetd, with the agent's certificate: set agent_cert_file and "
      "agent_key_file (fleetctl certs init makes agent-NAME.crt/.key; missing: "
      "agent_cert_file, agent_key_file)");
}

TEST(FleetConfigErrors, ReachAndChannel) {
  EXPECT_EQ(
      ErrorOf(Edit("  - name: local\n", "  - name: pve1\n    reach: {kind: ssh}\n",
                   Edit("      - ctid: sim\n", "      - ctid: 201\n",
                        Edit("        base_port: 30000\n",
                             "        base_port: 30000\n        channel: {kind: direct, "
                             "address: 127.0.0.1, agent_cert_file: a, agent_key_file: k}\n")))),
      "fleet.yaml:3: hosts[0].reach.address: a host reached over ssh needs an address\n"
      "fleet.yaml:9: hosts[0].containers[0].channel: a TCP channel, even on loopback (every "
      "local user can reach the port; the agent serves plaintext only on its unix socket, the "
      "loopback channel's default address), needs mutual TLS: set ca_file, cert_file and "
      "key_file (missing: ca_file, cert_file, key_file)");
  EXPECT_EQ(ErrorOf(Edit("  - name: local\n", "  - name: local\n    reach: {address: pve1}\n")),
            "fleet.yaml:3: hosts[0].reach.address: only used when the host is reached over ssh "
            "(this one is local)");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {kind: direct, address: "
                         "10.0.0.20}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel: a direct channel off loopback needs "
            "mutual TLS: set ca_file, cert_file and key_file (missing: ca_file, cert_file, "
            "key_file)");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {kind: direct, address: "
                         "10.0.0.20, ca_file: ca.crt, cert_file: d.crt}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel: a direct channel off loopback needs "
            "mutual TLS: set ca_file, cert_file and key_file (missing: key_file)");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {kind: direct}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel.address: a direct channel needs the "
            "agent's address");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {kind: ssh_tunnel, ca_file: "
                         "a, cert_file: b, key_file: c}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel.kind: an ssh_tunnel channel needs a host "
            "reached over ssh (this one is local)");
  EXPECT_EQ(
      ErrorOf(Edit("  - name: local\n", "  - name: pve1\n    reach: {kind: ssh, address: h}\n",
                   Edit("      - ctid: sim\n", "      - ctid: 201\n",
                        Edit("        base_port: 30000\n",
                             "        base_port: 30000\n        channel: {kind: loopback, "
                             "agent_cert_file: a, agent_key_file: k}\n")))),
      "fleet.yaml:9: hosts[0].containers[0].channel.kind: a loopback channel needs a local "
      "host (this one is reached over ssh): use direct or ssh_tunnel");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {address: 10.1.1.1}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel.address: a loopback channel needs a "
            "loopback address, got '10.1.1.1'");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {ca_file: ca.crt}\n")),
            "fleet.yaml:8: hosts[0].containers[0].channel: TLS needs all of ca_file, cert_file and "
            "key_file (missing: cert_file, key_file)");
}

TEST(FleetConfigErrors, ATcpChannelNeedsTlsEvenOnLoopback) {
  for (const char* kind : {"direct", "loopback"}) {
    for (const char* address : {"127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]"}) {
      const std::string channel = absl::StrCat(
          "        base_port: 30000\n        channel: {kind: ", kind, ", address: '", address, "'");
      EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n", absl::StrCat(channel, "}\n"))),
                "fleet.yaml:8: hosts[0].containers[0].channel: a TCP channel, even on loopback "
                "(every local user can reach the port; the agent serves plaintext only on its "
                "unix socket, the loopback channel's default address), needs mutual TLS: set "
                "ca_file, cert_file and key_file (missing: ca_file, cert_file, key_file)")
          << kind << " " << address;
      // With TLS, the certificate's name: a loopback address names no container.
      EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                             absl::StrCat(channel, ", ca_file: c, cert_file: d, key_file: k}\n"))),
                absl::StrCat("fleet.yaml:8: hosts[0].containers[0].channel.tls_name: a TLS "
                             "channel to '",
                             address,
                             "' needs tls_name: the name in this container's agent certificate "
                             "(fleetctl certs init --agents NAME), which no other container's "
                             "carries"))
          << kind << " " << address;
      const FleetConfig config = Parse(
          Edit("        base_port: 30000\n",
               absl::StrCat(channel, ", ca_file: c, cert_file: d, key_file: k, tls_name: sim}\n")));
      EXPECT_EQ(config.hosts(0).containers(0).channel().tls_name(), "sim");
    }
  }
}

TEST(FleetConfigErrors, AnSshTunnelWithoutAnAddressNeedsATlsName) {
  const std::string ssh =
      Edit("  - name: local\n", "  - name: pve1\n    reach: {kind: ssh, address: h}\n",
           Edit("      - ctid: sim\n", "      - ctid: 201\n"));
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        channel: {ca_file: c, cert_file: d, "
                         "key_file: k, agent_cert_file: a, agent_key_file: b}\n",
                         ssh)),
            "fleet.yaml:9: hosts[0].containers[0].channel.tls_name: a TLS channel to 127.0.0.1 "
            "needs tls_name: the name in this container's agent certificate (fleetctl certs init "
            "--agents NAME), which no other container's carries");
  // The container's address on the host's bridge names it.
  const FleetConfig config =
      Parse(Edit("        base_port: 30000\n",
                 "        base_port: 30000\n        channel: {address: 10.0.3.5, ca_file: c, "
                 "cert_file: d, key_file: k, agent_cert_file: a, agent_key_file: b}\n",
                 ssh));
  EXPECT_EQ(config.hosts(0).containers(0).channel().kind(), Channel::SSH_TUNNEL);
}

TEST(FleetConfigErrors, TwoContainersNeverShareAnAgentSocket) {
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n", R"(        base_port: 30000
      - ctid: sim2
        gpus: [0]
        template: sglang
        base_port: 31000
)")),
            "fleet.yaml:8: hosts[0].containers[1].channel.address: agent socket "
            "'unix:/var/lib/gpu-fleet-agent/agent.sock' is also the agent socket of container "
            "'sim' (line 4): give each container's agent its own");
}

TEST(FleetConfig, AgentOnAUnixSocketNeedsNoTlsAndNoPort) {
  const FleetConfig config = Parse(Edit("        base_port: 30000\n", R"(        base_port: 30000
        channel: {address: "unix:/run/fleet-agent.sock"}
      - ctid: sim2
        channel: {kind: direct, address: "unix:/run/fleet-agent2.sock"}
        gpus: [0]
        template: sglang
        base_port: 31000
)"));
  EXPECT_EQ(config.hosts(0).containers(0).channel().kind(), Channel::LOOPBACK);
  EXPECT_EQ(config.hosts(0).containers(1).channel().kind(), Channel::DIRECT);
  EXPECT_EQ(
      ErrorOf(Edit("        base_port: 30000\n",
                   "        base_port: 30000\n        channel: {address: 'unix:agent.sock'}\n")),
      "fleet.yaml:8: hosts[0].containers[0].channel.address: a unix socket address is "
      "unix:/absolute/path, got 'unix:agent.sock'");
}

TEST(FleetConfigErrors, Templates) {
  EXPECT_EQ(ErrorOf(Edit(R"(--port, "{port}"])", R"(--port, "{ports}"])")),
            "fleet.yaml:11: templates[0].argv[6]: unknown placeholder '{ports}' (did you mean "
            "'{port}'?); known: {gpu} {port} {log} {model} {gpus} {gpu_count}");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "")),
            "fleet.yaml:10: templates[0].argv[4]: uses {model} but the template has no model");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "    model: /models/m\n    argv: []\n",
                         Edit("    argv: [/venv/bin/python, -m, sglang.launch_server, "
                              "--model-path, \"{model}\", --port, \"{port}\"]\n",
                              ""))),
            "fleet.yaml:11: templates[0].argv: at least one argument (the program) is required");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n",
                         "    model: /models/m\n    log_path: logs/{gpu}.log\n")),
            "fleet.yaml:11: templates[0].log_path: must be an absolute path after expansion, got "
            "'logs/0.log'");
  EXPECT_EQ(
      ErrorOf(Edit("    model: /models/m\n", "    model: /models/m\n    log_path: /l/{log}\n")),
      "fleet.yaml:11: templates[0].log_path: {log} is the log path itself: it cannot be used "
      "in log_path");
  EXPECT_EQ(
      ErrorOf(Edit("    model: /models/m\n", "    model: /models/m\n    log_path: /l/{job}.log\n")),
      "fleet.yaml:11: templates[0].log_path: unknown placeholder '{job}'; known: {gpu} "
      "{port} {log} {model} {gpus} {gpu_count}");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n",
                         "    model: /models/m\n    log_path: /l/server.log\n")),
            "fleet.yaml:6: hosts[0].containers[0].template: template 'sglang' writes the logs of "
            "GPU 0 and GPU 1 to one file '/l/server.log': put {gpu} or {port} in its log_path");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "    model: /models/m\n    engine: tgi\n")),
            "fleet.yaml:11: templates[0].engine: unknown engine 'tgi'; known: sglang, vllm");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n", "    model: /models/m\n    workdir: work\n")),
            "fleet.yaml:11: templates[0].workdir: must be an absolute path, got 'work'");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n",
                         "    model: /models/m\n    readiness: {path: health}\n")),
            "fleet.yaml:11: templates[0].readiness.path: an HTTP path starting with '/' is "
            "required, got 'health'");
}

TEST(FleetConfigErrors, Environment) {
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n",
                         "    model: /models/m\n    env: {CUDA_VISIBLE_DEVICES: '0'}\n")),
            "fleet.yaml:11: templates[0].env.CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is set for "
            "each server from the container's gpus");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n",
                         "    model: /models/m\n    env: {CUDA_DEVICE_ORDER: FASTEST_FIRST}\n")),
            "fleet.yaml:11: templates[0].env.CUDA_DEVICE_ORDER: CUDA_DEVICE_ORDER must be "
            "PCI_BUS_ID, got 'FASTEST_FIRST': the gpus are nvidia-smi's indexes, which are PCI "
            "order");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        env: {1BAD: x}\n")),
            "fleet.yaml:8: hosts[0].containers[0].env.1BAD: invalid environment variable name "
            "'1BAD': use letters, digits and '_', not starting with a digit");
}

TEST(FleetConfigErrors, EnvFromFile) {
  EXPECT_EQ(
      ErrorOf(Edit("        base_port: 30000\n",
                   "        base_port: 30000\n        env_from_file: {HF_TOKEN: hf_token}\n")),
      "fleet.yaml:8: hosts[0].containers[0].env_from_file.HF_TOKEN: must be an absolute "
      "path (at most 4096 bytes) of a file in the container, got 'hf_token'");
  EXPECT_EQ(ErrorOf(Edit("    model: /models/m\n",
                         "    model: /models/m\n    env: {HF_TOKEN: x}\n"
                         "    env_from_file: {HF_TOKEN: /etc/gpu-fleet/hf_token}\n")),
            "fleet.yaml:12: templates[0].env_from_file.HF_TOKEN: HF_TOKEN is also set in "
            "templates[0].env: give it one way");
}

TEST(ExpandServers, AValueFromAFileIsAPathInTheSpecAndWinsOverTheTemplatesValue) {
  const std::string yaml =
      Edit("    model: /models/m\n",
           "    model: /models/m\n    env: {HF_TOKEN: from-template, OTHER: t}\n"
           "    env_from_file: {WANDB_API_KEY: /etc/template/wandb}\n",
           Edit("        base_port: 30000\n",
                "        base_port: 30000\n        env_from_file: {HF_TOKEN: "
                "/etc/gpu-fleet/hf_token}\n"));
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(Parse(yaml));
  ASSERT_TRUE(servers.ok()) << servers.status();
  const DesiredServer& s = (*servers)[0];
  EXPECT_THAT(s.spec.env_from_file(),
              UnorderedElementsAre(Pair("HF_TOKEN", "/etc/gpu-fleet/hf_token"),
                                   Pair("WANDB_API_KEY", "/etc/template/wandb")));
  EXPECT_THAT(s.spec.env(),
              UnorderedElementsAre(Pair("OTHER", "t"), Pair("CUDA_VISIBLE_DEVICES", "0")));
}

TEST(FleetConfigErrors, ToolsAndPolicies) {
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        tools: {jit_cache_roots: [/]}\n")),
            "fleet.yaml:8: hosts[0].containers[0].tools.jit_cache_roots[0]: '/' would let "
            "remediation act on the whole file system");
  EXPECT_EQ(ErrorOf(Edit("        base_port: 30000\n",
                         "        base_port: 30000\n        tools: {venv: venv}\n")),
            "fleet.yaml:8: hosts[0].containers[0].tools.venv: must be an absolute path, got "
            "'venv'");
  EXPECT_EQ(ErrorOf(absl::StrCat(
                kMinimal, "policies:\n  - name: default\n    allowed_actions: [pip_instal]\n")),
            "fleet.yaml:14: policies[0].allowed_actions[0]: unknown action 'pip_instal' (did you "
            "mean 'pip_install'?); known: set_env, prepend_path, pip_install, apt_install, "
            "add_server_args, remove_server_args, clear_jit_cache, symlink");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal,
                                 "policies:\n  - name: default\n    backoff_initial: "
                                 "10m\n    backoff_max: 1m\n")),
            "fleet.yaml:14: policies[0].backoff_initial: backoff_initial (10m) is longer than "
            "backoff_max (1m)");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "policies:\n  - name: default\n    max_attempts: -1\n")),
            "fleet.yaml:14: policies[0].max_attempts: must be at least 1, got -1");
}

TEST(FleetConfigErrors, ReportsEverySemanticErrorInLineOrder) {
  EXPECT_EQ(
      ErrorOf(Edit("gpus: [0, 1]", "gpus: []", Edit("template: sglang", "template: x"))),
      "fleet.yaml:5: hosts[0].containers[0].gpus: at least one GPU index is required (here, or a "
      "server's in servers)\n"
      "fleet.yaml:6: hosts[0].containers[0].template: no template named 'x'; templates: "
      "sglang");
}

// --- files and examples ------------------------------------------------------------------------

TEST(LoadFleetConfig, NamesTheFileInErrors) {
  fleet::testing::TempDir dir;
  dir.WriteFile("fleet.yaml", Edit("gpus: [0, 1]", "gpus: [0, x]"));
  absl::StatusOr<FleetConfig> config = LoadFleetConfig(dir.Join("fleet.yaml"));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            absl::StrCat(dir.Join("fleet.yaml"),
                         ":5: hosts[0].containers[0].gpus[1]: expected an integer, got 'x'"));
  dir.WriteFile("ok.yaml", kMinimal);
  EXPECT_TRUE(LoadFleetConfig(dir.Join("ok.yaml")).ok());
  absl::StatusOr<FleetConfig> missing = LoadFleetConfig(dir.Join("missing.yaml"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.yaml"));
}

TEST(LoadFleetConfig, ShippedExamplesLoad) {
  for (const char* example : {"deploy/examples/sglang.yaml", "deploy/examples/vllm.yaml"}) {
    absl::StatusOr<FleetConfig> config = LoadFleetConfig(fleet::testing::SourcePath(example));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(ExpandServers(*config).ok()) << example;
  }
  absl::StatusOr<FleetConfig> sglang =
      LoadFleetConfig(fleet::testing::SourcePath("deploy/examples/sglang.yaml"));
  ASSERT_TRUE(sglang.ok());
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(*sglang);
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_EQ(servers->size(), 8u);
  EXPECT_EQ((*servers)[7].name, "local/200/gpu7");
  EXPECT_EQ((*servers)[7].spec.port(), 30007);
  EXPECT_EQ((*servers)[7].spec.log_path(), "/workspace/sglang_logs/sglang_gpu7.log");
  absl::StatusOr<FleetConfig> vllm =
      LoadFleetConfig(fleet::testing::SourcePath("deploy/examples/vllm.yaml"));
  ASSERT_TRUE(vllm.ok());
  servers = ExpandServers(*vllm);
  ASSERT_TRUE(servers.ok());
  ASSERT_EQ(servers->size(), 3u);
  EXPECT_THAT((*servers)[0].spec.argv(),
              ElementsAreArray({"/opt/vllm/bin/vllm", "serve", "/models/Meta-Llama-3.1-8B-Instruct",
                                "--port", "8000", "--host", "127.0.0.1", "--gpu-memory-utilization",
                                "0.90", "--tensor-parallel-size", "2"}));
  EXPECT_THAT((*servers)[0].spec.gpus(), ElementsAre(0, 1));
  EXPECT_EQ((*servers)[1].name, "local/201/gpu2");
  EXPECT_EQ((*servers)[1].spec.argv((*servers)[1].spec.argv_size() - 1), "1");
  EXPECT_TRUE((*servers)[0].spec.readiness().completion_check());
  EXPECT_EQ((*servers)[0].policy.name(), "patient");
}

TEST(LoadFleetConfig, DocumentedTensorParallelFleetLoads) {
  const std::string doc = fleet::testing::ReadFile(fleet::testing::SourcePath("docs/config.md"));
  const size_t section = doc.find("## Tensor-parallel servers");
  ASSERT_NE(section, std::string::npos);
  const size_t start = doc.find("```yaml\n", section);
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("```\n", start + 8);
  absl::StatusOr<std::vector<DesiredServer>> servers =
      ExpandServers(Parse(doc.substr(start + 8, end - start - 8)));
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_EQ(servers->size(), 7u);
  EXPECT_EQ((*servers)[0].name, "local/201/gpu0");
  EXPECT_EQ((*servers)[0].spec.port(), 8000);
  EXPECT_EQ((*servers)[0].spec.env().at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ((*servers)[0].spec.argv((*servers)[0].spec.argv_size() - 1), "2");
  EXPECT_EQ((*servers)[1].name, "local/201/gpu2");
}

TEST(LoadFleetConfig, DocumentedExampleLoads) {
  const std::string doc = fleet::testing::ReadFile(fleet::testing::SourcePath("docs/config.md"));
  const size_t start = doc.find("```yaml\n");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("```\n", start + 8);
  ASSERT_NE(end, std::string::npos);
  absl::StatusOr<std::vector<DesiredServer>> servers =
      ExpandServers(Parse(doc.substr(start + 8, end - start - 8)));
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_EQ(servers->size(), 8u);
}

// --- expansion ---------------------------------------------------------------------------------

constexpr char kTwoHosts[] = R"(hosts:
  - name: pve2
    reach: {kind: ssh, address: pve2.lan}
    containers:
      - ctid: "300"
        channel: {address: 10.0.3.30, ca_file: /p/ca, cert_file: /p/c, key_file: /p/k,
                  agent_cert_file: /p/a, agent_key_file: /p/ak}
        gpus: [10, 2]
        template: sglang
        policy: slow
        base_port: 30000
        env: {SHARED: container, ONLY_CONTAINER: c}
        tools: {venv: /venv, pip: [/venv/bin/python, -m, pip]}
  - name: local
    containers:
      - ctid: sim
        gpus: [1]
        template: vllm
        base_port: 8000
templates:
  - name: sglang
    model: /models/m
    argv: [python, -m, sglang.launch_server, --model-path, "{model}", --port, "{port}",
           --log-file, "{log}", --base-gpu-id, "{gpu}"]
    env: {SHARED: template, ONLY_TEMPLATE: t}
    log_path: /logs/{model}/gpu{gpu}-{port}.log
    workdir: /work
  - name: vllm
    engine: vllm
    model: m
    argv: [vllm, serve, "{model}"]
policies:
  - name: slow
    stall_timeout: 20m
    startup_deadline: 2h
)";

TEST(ExpandServers, OneServerPerGpuSortedByName) {
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(Parse(kTwoHosts));
  ASSERT_TRUE(servers.ok()) << servers.status();
  std::vector<std::string> names;
  for (const DesiredServer& s : *servers) names.push_back(s.name);
  EXPECT_THAT(names, ElementsAre("local/sim/gpu1", "pve2/300/gpu10", "pve2/300/gpu2"));
}

TEST(ExpandServers, ExpandsArgvPortLogEnvAndTakesPolicyAndTools) {
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(Parse(kTwoHosts));
  ASSERT_TRUE(servers.ok()) << servers.status();
  const DesiredServer& s = (*servers)[2];  // pve2/300/gpu2
  ASSERT_EQ(s.name, "pve2/300/gpu2");
  EXPECT_EQ(s.spec.server().host(), "pve2");
  EXPECT_EQ(s.spec.server().container(), "300");
  EXPECT_EQ(s.spec.server().gpu(), 2);
  EXPECT_EQ(s.spec.engine(), "sglang");
  EXPECT_EQ(s.spec.port(), 30002);
  EXPECT_EQ(s.spec.log_path(), "/logs//models/m/gpu2-30002.log");
  EXPECT_THAT(s.spec.argv(),
              ElementsAreArray({"python", "-m", "sglang.launch_server", "--model-path", "/models/m",
                                "--port", "30002", "--log-file", "/logs//models/m/gpu2-30002.log",
                                "--base-gpu-id", "2"}));
  EXPECT_THAT(s.spec.env(),
              UnorderedElementsAre(Pair("SHARED", "container"), Pair("ONLY_TEMPLATE", "t"),
                                   Pair("ONLY_CONTAINER", "c"), Pair("CUDA_VISIBLE_DEVICES", "2")));
  EXPECT_EQ(s.spec.workdir(), "/work");
  EXPECT_EQ(s.spec.readiness().path(), "/health_generate");
  EXPECT_EQ(D(s.spec.stall_timeout()), absl::Minutes(20));
  EXPECT_EQ(D(s.spec.startup_deadline()), absl::Hours(2));
  EXPECT_EQ(s.spec.tools().venv(), "/venv");
  EXPECT_THAT(s.spec.tools().pip(), ElementsAre("/venv/bin/python", "-m", "pip"));
  EXPECT_EQ(s.policy.name(), "slow");
  EXPECT_EQ(s.policy.max_attempts(), 8);

  const DesiredServer& v = (*servers)[0];  // local/sim/gpu1: vllm, default policy
  EXPECT_EQ(v.spec.port(), 8001);
  EXPECT_EQ(v.spec.log_path(), "/workspace/vllm_logs/vllm_gpu1.log");
  EXPECT_THAT(v.spec.argv(), ElementsAre("vllm", "serve", "m"));
  EXPECT_EQ(v.spec.readiness().path(), "/health");
  EXPECT_TRUE(v.spec.readiness().completion_check());
  EXPECT_THAT(v.spec.env(), UnorderedElementsAre(Pair("CUDA_VISIBLE_DEVICES", "1")));
  EXPECT_EQ(D(v.spec.stall_timeout()), absl::Minutes(10));
  EXPECT_EQ(D(v.spec.startup_deadline()), absl::Minutes(90));
  EXPECT_EQ(v.policy.name(), "default");
}

TEST(ExpandServers, ConfigBuiltInCodeGetsDefaults) {
  FleetConfig config;
  auto* host = config.add_hosts();
  host->set_name("local");
  auto* container = host->add_containers();
  container->set_ctid("sim");
  container->add_gpus(3);
  container->set_template_("t");
  container->set_base_port(30000);
  auto* tmpl = config.add_templates();
  tmpl->set_name("t");
  tmpl->add_argv("/bin/server");
  tmpl->add_argv("--port={port}");
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(config);
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_EQ(servers->size(), 1u);
  const DesiredServer& s = (*servers)[0];
  EXPECT_EQ(s.name, "local/sim/gpu3");
  EXPECT_THAT(s.spec.argv(), ElementsAre("/bin/server", "--port=30003"));
  EXPECT_EQ(s.spec.log_path(), "/workspace/sglang_logs/sglang_gpu3.log");
  EXPECT_EQ(s.spec.readiness().path(), "/health_generate");
  EXPECT_EQ(D(s.spec.stall_timeout()), absl::Minutes(10));
  EXPECT_EQ(D(s.spec.startup_deadline()), absl::Minutes(90));
  EXPECT_EQ(s.policy.name(), "default");
  EXPECT_EQ(s.policy.max_attempts(), 8);
  EXPECT_TRUE(s.policy.canary());
}

TEST(ExpandServers, InvalidConfigBuiltInCodeNamesTheFieldPaths) {
  FleetConfig config;
  auto* host = config.add_hosts();
  host->set_name("local");
  auto* container = host->add_containers();
  container->set_ctid("sim");
  container->set_template_("missing");
  container->set_base_port(30000);
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(config);
  ASSERT_FALSE(servers.ok());
  EXPECT_EQ(servers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(servers.status().message(),
            "hosts[0].containers[0].gpus: at least one GPU index is required (here, or a "
            "server's in servers)\n"
            "hosts[0].containers[0].template: no template named 'missing'; the config defines no "
            "templates");
}

// A vLLM container with a tensor-parallel server on GPUs 0 and 1 and two one-GPU servers.
constexpr char kTensorParallel[] = R"(hosts:
  - name: local
    containers:
      - ctid: sim
        gpus: [3, 2]
        servers:
          - gpus: [1, 0]
        template: vllm
        base_port: 8000
templates:
  - name: vllm
    engine: vllm
    model: m
    argv: [vllm, serve, "{model}", --port, "{port}", --tensor-parallel-size, "{gpu_count}"]
    log_path: "/logs/vllm_gpu{gpus}.log"
)";

TEST(ExpandServers, ATensorParallelServerIsOneServerOnItsGpus) {
  absl::StatusOr<std::vector<DesiredServer>> servers = ExpandServers(Parse(kTensorParallel));
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_EQ(servers->size(), 3u);
  // Named by its lead, the GPU listed first: its port, its {gpu}.
  const DesiredServer& tp = (*servers)[0];
  EXPECT_EQ(tp.name, "local/sim/gpu1");
  EXPECT_EQ(tp.spec.server().gpu(), 1);
  EXPECT_THAT(tp.spec.gpus(), ElementsAre(1, 0));
  EXPECT_EQ(tp.spec.port(), 8001);
  EXPECT_EQ(tp.spec.log_path(), "/logs/vllm_gpu1,0.log");
  EXPECT_THAT(tp.spec.argv(),
              ElementsAre("vllm", "serve", "m", "--port", "8001", "--tensor-parallel-size", "2"));
  EXPECT_THAT(tp.spec.env(), UnorderedElementsAre(Pair("CUDA_VISIBLE_DEVICES", "1,0")));
  const DesiredServer& one = (*servers)[1];
  EXPECT_EQ(one.name, "local/sim/gpu2");
  EXPECT_THAT(one.spec.gpus(), ElementsAre()) << "one GPU: spec.server.gpu says it, as before";
  EXPECT_THAT(one.spec.argv(),
              ElementsAre("vllm", "serve", "m", "--port", "8002", "--tensor-parallel-size", "1"));
  EXPECT_THAT(one.spec.env(), UnorderedElementsAre(Pair("CUDA_VISIBLE_DEVICES", "2")));
  EXPECT_EQ((*servers)[2].name, "local/sim/gpu3");
}

TEST(FleetConfigErrors, TensorParallelServers) {
  // A GPU in both lists, or twice in one server.
  EXPECT_EQ(ErrorOf(Edit("gpus: [3, 2]", "gpus: [3, 0]", kTensorParallel)),
            "fleet.yaml:7: hosts[0].containers[0].servers[0].gpus[1]: GPU 0 is listed twice "
            "(first at line 5)");
  EXPECT_EQ(ErrorOf(Edit("[1, 0]", "[1, 1]", kTensorParallel)),
            "fleet.yaml:7: hosts[0].containers[0].servers[0].gpus[1]: GPU 1 is listed twice "
            "(first at line 7)");
  EXPECT_EQ(ErrorOf(Edit("[1, 0]", "[]", kTensorParallel)),
            "fleet.yaml:7: hosts[0].containers[0].servers[0].gpus: at least one GPU index is "
            "required");
  // Servers alone are enough.
  EXPECT_TRUE(ParseFleetConfig(Edit("        gpus: [3, 2]\n", "", kTensorParallel), "f").ok());
  // The argv sets no tensor-parallel size: vLLM would use one of the two GPUs.
  EXPECT_EQ(ErrorOf(Edit(", --tensor-parallel-size, \"{gpu_count}\"", "", kTensorParallel)),
            "fleet.yaml:7: hosts[0].containers[0].servers[0]: this server has 2 GPUs (1,0) but "
            "template 'vllm' sets no tensor-parallel size: it would use one of them; add "
            "--tensor-parallel-size {gpu_count} to its argv");
  // A fixed size larger than a server's GPUs: CUDA's invalid device ordinal, said now.
  EXPECT_EQ(ErrorOf(Edit("\"{gpu_count}\"", "\"2\"", kTensorParallel)),
            "fleet.yaml:5: hosts[0].containers[0].gpus[0]: template 'vllm' asks for 2 GPUs "
            "(--tensor-parallel-size 2) but this server has 1 (3): CUDA would fail with \"invalid "
            "device ordinal\"; give it 2 GPUs in servers, or --tensor-parallel-size {gpu_count} "
            "in the template's argv\n"
            "fleet.yaml:5: hosts[0].containers[0].gpus[1]: template 'vllm' asks for 2 GPUs "
            "(--tensor-parallel-size 2) but this server has 1 (2): CUDA would fail with \"invalid "
            "device ordinal\"; give it 2 GPUs in servers, or --tensor-parallel-size {gpu_count} "
            "in the template's argv");
  // Tensor x pipeline parallel fills the GPUs; a data-parallel size is not second-guessed.
  EXPECT_TRUE(ParseFleetConfig(
                  Edit("[1, 0]", "[1, 0, 4, 5]",
                       Edit("\"{gpu_count}\"]", "\"{gpu_count}\", -pp, \"1\"]", kTensorParallel)),
                  "f")
                  .ok());
  EXPECT_TRUE(ParseFleetConfig(Edit(", --tensor-parallel-size, \"{gpu_count}\"",
                                    ", --data-parallel-size, \"{gpu_count}\"", kTensorParallel),
                               "f")
                  .ok());
  // vLLM counts its data-parallel ranks: 2 x 2 does not fit 2 GPUs.
  EXPECT_THAT(ErrorOf(Edit("\"{gpu_count}\"]", "\"{gpu_count}\", -dp, \"2\"]", kTensorParallel)),
              HasSubstr("asks for 4 GPUs (--tensor-parallel-size 2 x -dp 2)"));
  // A wrapper whose shell string carries {gpu_count}: the size is the user's, trusted.
  EXPECT_TRUE(
      ParseFleetConfig(Edit("argv: [vllm, serve, \"{model}\", --port, \"{port}\", "
                            "--tensor-parallel-size, \"{gpu_count}\"]",
                            "argv: [/bin/sh, -c, \"exec vllm serve {model} --port {port} -tp "
                            "{gpu_count}\"]",
                            kTensorParallel),
                       "f")
          .ok());
}

TEST(ParallelSize, ReadsEachEnginesFlagsBothForms) {
  EXPECT_EQ(ParallelSizeOf("vllm", {"vllm", "serve", "m"}).gpus, 1);
  EXPECT_EQ(ParallelSizeOf("vllm", {"vllm", "serve", "m"}).how, "");
  const ParallelSize v = ParallelSizeOf("vllm", {"-tp", "2", "--pipeline-parallel-size=2"});
  EXPECT_EQ(v.gpus, 4);
  EXPECT_EQ(v.how, "-tp 2 x --pipeline-parallel-size 2");
  EXPECT_EQ(ParallelSizeOf("vllm", {"--tensor-parallel-size", "2", "-tp", "4"}).gpus, 4);
  EXPECT_TRUE(ParallelSizeOf("vllm", {"-dp", "2"}).data_parallel);
  EXPECT_EQ(ParallelSizeOf("vllm", {"-tp", "2", "-dp", "2"}).gpus, 4);
  EXPECT_EQ(ParallelSizeOf("vllm", {"-tp", "2", "-dp", "2", "--data-parallel-size-local=1"}).gpus,
            2);
  EXPECT_EQ(ParallelSizeOf("vllm", {"--tensor_parallel_size=2"}).gpus, 2);
  EXPECT_EQ(ParallelSizeOf("sglang", {"--tp", "2", "--dp", "2"}).gpus, 2);
  // SGLang's spellings are not vLLM's.
  EXPECT_EQ(ParallelSizeOf("sglang", {"--tp", "2"}).gpus, 2);
  EXPECT_EQ(ParallelSizeOf("sglang", {"--tp-size=4", "--pp-size", "2"}).gpus, 8);
  EXPECT_EQ(ParallelSizeOf("vllm", {"--tp-size", "4"}).gpus, 1);
  // Not a size: ignored (the engine's own parser says so at launch).
  EXPECT_EQ(ParallelSizeOf("vllm", {"-tp", "two"}).gpus, 1);
  EXPECT_EQ(ParallelSizeOf("vllm", {"-tp", "0"}).gpus, 1);
  EXPECT_EQ(ParallelSizeOf("vllm", {"-tp"}).gpus, 1);
  EXPECT_EQ(ParallelSizeOf("vllm", {"-tpx=2"}).gpus, 1);
}

TEST(ApplyConfigDefaults, IsIdempotent) {
  FleetConfig config = Parse(kTwoHosts);
  FleetConfig again = config;
  ApplyConfigDefaults(&again);
  EXPECT_EQ(again.DebugString(), config.DebugString());
  EXPECT_TRUE(ValidateFleetConfig(config).ok());
}

}  // namespace
}  // namespace fleet::config

namespace fleet::config {
namespace {

// --- limits on what a document may hold ---------------------------------------------------------

TEST(FleetConfigLimits, ABillionLaughsIsRefusedBeforeItIsWalked) {
  // Ten aliases of ten aliases of ... : 10^9 nodes once expanded, in under a kilobyte.
  std::string yaml = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    absl::StrAppend(&yaml, "l", i, ": &l", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&yaml, j == 0 ? "" : ", ", "*l", i - 1);
    absl::StrAppend(&yaml, "]\n");
  }
  absl::StrAppend(&yaml, kMinimal);
  EXPECT_EQ(ErrorOf(yaml),
            "fleet.yaml:6: the document holds more than 1000000 nodes once its aliases are "
            "expanded (a config needs far fewer; aliases of aliases multiply)");
}

TEST(FleetConfigLimits, DeepNestingIsRefused) {
  for (int depth : {65, 1000, 100000}) {
    const std::string yaml =
        absl::StrCat("hosts: ", std::string(depth, '['), std::string(depth, ']'), "\n");
    EXPECT_EQ(ErrorOf(yaml),
              "fleet.yaml:1: nested more than 64 levels deep (a config needs "
              "fewer than 10)")
        << depth;
  }
  const std::string blocks = [] {
    std::string y = "hosts:\n";
    for (int i = 0; i < 200; ++i) absl::StrAppend(&y, std::string(2 * i + 2, ' '), "- a:\n");
    return y;
  }();
  EXPECT_THAT(ErrorOf(blocks), HasSubstr("nested more than 64 levels deep"));
}

TEST(FleetConfigLimits, ADocumentTooLargeIsRefusedBeforeParsing) {
  std::string yaml = kMinimal;
  yaml.append(kMaxYamlBytes - yaml.size(), '#');  // a comment: exactly at the limit, it loads
  yaml.back() = '\n';
  EXPECT_EQ(Parse(yaml).hosts_size(), 1);
  yaml.push_back('#');
  EXPECT_EQ(ErrorOf(yaml),
            "fleet.yaml: the document has more than 4194304 bytes (4 MiB), the "
            "most a config may have");
  // From a file: read only up to the limit.
  testing::TempDir dir;
  dir.WriteFile("big.yaml", yaml + std::string(8 << 20, '#'));
  absl::StatusOr<FleetConfig> big = LoadFleetConfig(dir.Join("big.yaml"));
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("more than 4194304 bytes"));
}

TEST(FleetConfigLimits, AliasesWithinTheLimitsStillWork) {
  const FleetConfig config = Parse(Edit("        base_port: 30000\n", R"(        base_port: 30000
        env: &common {HF_HOME: /hf}
      - ctid: sim2
        channel: {address: "unix:/run/agent2.sock"}
        gpus: [0]
        template: sglang
        base_port: 31000
        env: *common
)"));
  ASSERT_EQ(config.hosts(0).containers_size(), 2);
  EXPECT_EQ(config.hosts(0).containers(1).env().at("HF_HOME"), "/hf");
}

// --- notify (webhooks) ------------------------------------------------------------------------

TEST(FleetConfig, ReadsANotifyEntry) {
  const FleetConfig config = Parse(absl::StrCat(kMinimal, R"(notify:
  - name: oncall
    url: https://hooks.example.com/T0/B0
    events: [gave_up, agent_lost]
    secret_file: /etc/gpu-fleet/webhook.key
    ca_file: /etc/gpu-fleet/hooks-ca.pem
    timeout: 5s
    max_attempts: 3
)"));
  ASSERT_EQ(config.notify_size(), 1);
  const fleet::v1::Notify& n = config.notify(0);
  EXPECT_EQ(n.name(), "oncall");
  EXPECT_EQ(n.url(), "https://hooks.example.com/T0/B0");
  EXPECT_THAT(n.events(), ElementsAre("gave_up", "agent_lost"));
  EXPECT_EQ(n.secret_file(), "/etc/gpu-fleet/webhook.key");
  EXPECT_EQ(n.ca_file(), "/etc/gpu-fleet/hooks-ca.pem");
  EXPECT_EQ(D(n.timeout()), absl::Seconds(5));
  EXPECT_EQ(n.max_attempts(), 3);
}

TEST(FleetConfigErrors, NotifyEventsUrlsAndFiles) {
  const auto with = [](const std::string& entry) {
    return absl::StrCat(kMinimal, "notify:\n  - name: oncall\n", entry);
  };
  EXPECT_EQ(ErrorOf(with("    url: https://h.example/x\n    events: [gave_up, gaveup]\n")),
            "fleet.yaml:15: notify[0].events[1]: unknown event 'gaveup' (did you mean "
            "'gave_up'?); known: gave_up, remediation_awaiting_approval, remediation_failed, "
            "agent_lost, recovered");
  EXPECT_EQ(ErrorOf(with("    url: https://h.example/x\n    secret_file: keys/webhook.key\n")),
            "fleet.yaml:15: notify[0].secret_file: must be an absolute path");
  EXPECT_EQ(ErrorOf(with("    url: https://h.example/x\n    ca_file: ca.pem\n")),
            "fleet.yaml:15: notify[0].ca_file: must be an absolute path");
  EXPECT_EQ(ErrorOf(with("    url: http://hooks.example.com/x\n")),
            "fleet.yaml:14: notify[0].url: http:// to hooks.example.com: plain http only to a "
            "loopback address; use https");
  EXPECT_EQ(ErrorOf(with("    url: https://u:p@h.example/x\n")),
            "fleet.yaml:14: notify[0].url: a user or password in the URL: use secret_file for a "
            "key");
  EXPECT_THAT(ErrorOf(with("    events: [gave_up]\n")),
              HasSubstr("notify[0].url: a webhook needs a url (https://...)"));
  EXPECT_THAT(ErrorOf(with("    url: https://h.example/x\n    max_attempts: 0\n    "
                           "timeout: 0s\n")),
              HasSubstr("notify[0].timeout: "));
  EXPECT_THAT(ErrorOf(with("    url: https://h.example/x\n    max_attempts: 101\n")),
              HasSubstr("notify[0].max_attempts: must be 1 to 100 (or left out: 8), got 101"));
  EXPECT_THAT(ErrorOf(absl::StrCat(kMinimal, R"(notify:
  - name: a
    url: https://h.example/x
  - name: a
    url: https://h.example/y
)")),
              HasSubstr("notify[1].name: duplicate notify name 'a' (first at line 13)"));
}

}  // namespace
}  // namespace fleet::config

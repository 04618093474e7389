#include "common/config/desired_server.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/config/fleet_config.h"
#include "common/config/placeholders.h"
#include "common/config/server_name.h"

namespace fleet::config {

using fleet::v1::Container;
using fleet::v1::FleetConfig;
using fleet::v1::Host;
using fleet::v1::Policy;
using fleet::v1::ServerTemplate;

absl::StatusOr<std::vector<DesiredServer>> ExpandServers(const FleetConfig& config) {
  FLEET_RETURN_IF_ERROR(ValidateFleetConfig(config));
  FleetConfig effective = config;
  ApplyConfigDefaults(&effective);

  absl::flat_hash_map<std::string, const ServerTemplate*> templates;
  for (const ServerTemplate& t : effective.templates()) templates.try_emplace(t.name(), &t);
  absl::flat_hash_map<std::string, const Policy*> policies;
  for (const Policy& p : effective.policies()) policies.try_emplace(p.name(), &p);

  std::vector<DesiredServer> servers;
  for (const Host& host : effective.hosts()) {
    for (const Container& container : host.containers()) {
      // Validation guarantees both exist.
      const ServerTemplate& tmpl = *templates.at(container.template_());
      const Policy& policy = *policies.at(container.policy());
      for (const std::vector<int>& gpus : ContainerServerGpus(container)) {
        const int gpu = gpus.front();
        DesiredServer server;
        server.name = ServerName(host.name(), container.ctid(), gpu);
        server.policy = policy;
        fleet::v1::ServerSpec& spec = server.spec;
        spec.mutable_server()->set_host(host.name());
        spec.mutable_server()->set_container(container.ctid());
        spec.mutable_server()->set_gpu(gpu);
        // Only for a server on several: a one-GPU server's spec stays as before the field, so a
        // record stored by an older fleetd compares equal (no restart at the first deploy).
        if (gpus.size() > 1) spec.mutable_gpus()->Add(gpus.begin(), gpus.end());
        spec.set_engine(tmpl.engine());
        const int port = container.base_port() + gpu;
        spec.set_port(port);
        PlaceholderValues values = ServerPlaceholders(gpus, port, tmpl.model());
        FLEET_ASSIGN_OR_RETURN(values.log, ExpandPlaceholders(tmpl.log_path(), values));
        spec.set_log_path(values.log);
        for (const std::string& arg : tmpl.argv()) {
          FLEET_ASSIGN_OR_RETURN(std::string expanded, ExpandPlaceholders(arg, values));
          spec.add_argv(std::move(expanded));
        }
        auto& env = *spec.mutable_env();
        for (const auto& [name, value] : tmpl.env()) env[name] = value;
        for (const auto& [name, value] : container.env()) env[name] = value;
        // Read by the agent at launch (the value never reaches fleet.db); a file wins over a
        // value of the same name from the other level.
        auto& files = *spec.mutable_env_from_file();
        for (const auto& [name, file] : tmpl.env_from_file()) files[name] = file;
        for (const auto& [name, value] : container.env()) {
          if (files.contains(name)) files.erase(name);
        }
        for (const auto& [name, file] : container.env_from_file()) files[name] = file;
        for (const auto& [name, file] : files) env.erase(name);
        env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(gpus, ",");
        spec.set_workdir(tmpl.workdir());
        *spec.mutable_readiness() = tmpl.readiness();
        *spec.mutable_stall_timeout() = policy.stall_timeout();
        *spec.mutable_startup_deadline() = policy.startup_deadline();
        *spec.mutable_tools() = container.tools();
        servers.push_back(std::move(server));
      }
    }
  }
  std::sort(servers.begin(), servers.end(),
            [](const DesiredServer& a, const DesiredServer& b) { return a.name < b.name; });
  return servers;
}

}  // namespace fleet::config

// `fleetd --config FILE` at a start: seed, apply or ignore FILE (daemon.h StartupConfigAction).
// Every config deployed with its text is stored with that text's digest (FleetStore::SaveConfig);
// FILE is applied again only when its digest differs from the one stored with the newest config
// applied from its path. A restart by systemd (which always passes --config) thus no longer undoes
// a `fleetctl deploy -f` made since.
#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"

namespace fleet::daemon {

StartupConfigAction DecideStartupConfig(bool record_has_config,
                                        const std::optional<std::string>& last_digest_from_file,
                                        const std::string& file_digest) {
  if (!record_has_config) return StartupConfigAction::kSeeded;
  if (last_digest_from_file.has_value() && *last_digest_from_file == file_digest) {
    return StartupConfigAction::kIgnored;
  }
  return StartupConfigAction::kApplied;
}

absl::StatusOr<StartupConfigOutcome> Daemon::ApplyStartupConfig(const std::string& source,
                                                                const std::string& yaml) {
  std::optional<StoredConfigInfo> latest;
  std::optional<StoredConfigInfo> from_file;
  {
    absl::MutexLock lock(&store_mu_);
    auto l = store_->LatestConfigInfo();
    if (!l.ok()) return l.status();
    latest = *std::move(l);
    auto f = store_->LastConfigFrom(source);
    if (!f.ok()) return f.status();
    from_file = *std::move(f);
  }
  std::optional<std::string> last_digest;
  if (from_file.has_value()) last_digest = from_file->digest;
  StartupConfigOutcome out;
  out.action = DecideStartupConfig(latest.has_value(), last_digest, ConfigDigest(yaml));
  if (out.action == StartupConfigAction::kIgnored) {
    out.version = latest->version;
    out.message =
        latest->version == from_file->version
            ? absl::StrCat("config ", source, " ignored: unchanged since it was applied (version ",
                           from_file->version, "), which the record holds")
            : absl::StrCat("config ", source,
                           " ignored: unchanged since it was applied as version ",
                           from_file->version, ", and the record's config is newer (version ",
                           latest->version, " from ", latest->source, ")");
    return out;
  }
  fleet::v1::DeployRequest request;
  request.set_source(source);
  request.set_yaml(yaml);
  auto deployed = Deploy(request);
  if (!deployed.ok()) return deployed.status();
  out.version = deployed->config_version();
  if (out.action == StartupConfigAction::kSeeded) {
    out.message =
        absl::StrCat("config ", source, " seeded the empty record (version ", out.version, ")");
  } else if (from_file.has_value()) {
    out.message =
        absl::StrCat("config ", source, " applied: changed since it was applied as version ",
                     from_file->version, " (now version ", out.version, ")");
  } else {
    out.message =
        absl::StrCat("config ", source, " applied: never applied before (version ", out.version,
                     ", after version ", latest->version, " from ", latest->source, ")");
  }
  return out;
}

}  // namespace fleet::daemon

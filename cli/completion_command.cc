#include "cli/completion_command.h"

#include <ostream>

#include "cli/command_errors.h"

namespace fleet::cli {
namespace {

// Global flags may come before the verb; their values are skipped when looking for it, and
// --socket/--state-dir, --server and its TLS flags are passed on when asking fleetd for SERVER
// names.
constexpr char kBashScript[] =
    R"bash(# bash completion for fleetctl: source <(fleetctl completion bash)
_fleetctl_servers() {
  local args=() i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --socket|--state-dir|--server|--tls-cert|--tls-key|--tls-ca) args+=("${COMP_WORDS[i]}" "${COMP_WORDS[i+1]}") ;;
      --insecure) args+=(--insecure) ;;
    esac
  done
  "${COMP_WORDS[0]}" "${args[@]}" --timeout 2s status -o name 2>/dev/null
}

# Host names, from fleetd's config (`hosts -o json`), for `hosts trust`.
_fleetctl_hosts() {
  local args=() i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --socket|--state-dir|--server|--tls-cert|--tls-key|--tls-ca) args+=("${COMP_WORDS[i]}" "${COMP_WORDS[i+1]}") ;;
      --insecure) args+=(--insecure) ;;
    esac
  done
  "${COMP_WORDS[0]}" "${args[@]}" --timeout 2s hosts -o json 2>/dev/null |
    grep -o '"name":"[^"]*"' | cut -d'"' -f4
}

_fleetctl() {
  local cur prev verb="" sub="" i
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --socket|--state-dir|--timeout|--server|--tls-cert|--tls-key|--tls-ca) ((i++)) ;;
      -*) ;;
      *) verb="${COMP_WORDS[i]}"; break ;;
    esac
  done
  # The sub-verb of `hosts` (list, trust), when it is already typed.
  if [[ $verb == hosts ]]; then
    for ((i++; i < COMP_CWORD; i++)); do
      case "${COMP_WORDS[i]}" in
        -o|--output|--fingerprint) ((i++)) ;;
        -*) ;;
        *) sub="${COMP_WORDS[i]}"; break ;;
      esac
    done
  fi
  if [[ -z $verb ]]; then
    case "$prev" in
      --socket|--state-dir|--tls-cert|--tls-key|--tls-ca) COMPREPLY=($(compgen -f -- "$cur")); return ;;
      --timeout|--server) return ;;
    esac
    COMPREPLY=($(compgen -W "deploy status logs events attempts explain plan apply remediations restart stop hosts certs completion --socket --state-dir --server --tls-cert --tls-key --tls-ca --insecure --timeout --help --version" -- "$cur"))
    return
  fi
  case "$verb:$prev" in
    status:-o|status:--output) COMPREPLY=($(compgen -W "table wide json name" -- "$cur")); return ;;
    remediations:-o|remediations:--output) COMPREPLY=($(compgen -W "table wide json" -- "$cur")); return ;;
    explain:-o|explain:--output|plan:-o|plan:--output) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
    hosts:-o|hosts:--output) [[ $sub == trust ]] && COMPREPLY=($(compgen -W "text json" -- "$cur")) || COMPREPLY=($(compgen -W "table json" -- "$cur")); return ;;
    hosts:--fingerprint) return ;;
    *:-o|*:--output) COMPREPLY=($(compgen -W "table json" -- "$cur")); return ;;
    explain:--color) COMPREPLY=($(compgen -W "auto always never" -- "$cur")); return ;;
    explain:--signatures|deploy:-f|deploy:--file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    certs:--dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    certs:--agents|certs:--listen-names|certs:--clients|certs:--days) return ;;
    explain:--server|deploy:--only) COMPREPLY=($(compgen -W "$(_fleetctl_servers)" -- "$cur")); return ;;
    *:--attempt|*:--tail) return ;;
  esac
  if [[ $cur == -* ]]; then
    local flags="--help"
    case "$verb" in
      status) flags+=" --output --watch --until-ready" ;;
      attempts) flags+=" --output" ;;
      logs) flags+=" --follow --attempt --tail" ;;
      events) flags+=" --follow --since --output" ;;
      explain) flags+=" --output --server --attempt --color --signatures --live" ;;
      restart) flags+=" --all --now --output" ;;
      stop) flags+=" --all --output" ;;
      deploy) flags+=" --file --only --dry-run --output" ;;
      plan|apply|remediations) flags+=" --output" ;;
      certs) flags+=" --dir --agents --listen-names --clients --days --force" ;;
      hosts) flags+=" --output"; [[ $sub == trust ]] && flags+=" --fingerprint" ;;
    esac
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    return
  fi
  case "$verb" in
    status|logs|attempts|restart|stop|plan|remediations) COMPREPLY=($(compgen -W "$(_fleetctl_servers)" -- "$cur")) ;;
    explain) COMPREPLY=($(compgen -f -- "$cur")) ;;
    hosts)
      if [[ -z $sub ]]; then
        COMPREPLY=($(compgen -W "list trust" -- "$cur"))
      elif [[ $sub == trust ]]; then
        COMPREPLY=($(compgen -W "$(_fleetctl_hosts)" -- "$cur"))
      fi ;;
    certs) COMPREPLY=($(compgen -W "init" -- "$cur")) ;;
    completion) COMPREPLY=($(compgen -W "bash" -- "$cur")) ;;
  esac
}
complete -o default -F _fleetctl fleetctl
)bash";

}  // namespace

int RunCompletion(const std::vector<std::string>& args, const CommandContext& ctx) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    *ctx.out << "usage: fleetctl completion bash\n\nPrints a bash completion script; load it "
                "with: source <(fleetctl completion bash)\n";
    return kExitOk;
  }
  if (args.size() != 1 || args[0] != "bash") {
    *ctx.err << "fleetctl completion: give the shell: bash (the only one supported)\n";
    return kExitError;
  }
  *ctx.out << kBashScript;
  ctx.out->flush();
  return kExitOk;
}

}  // namespace fleet::cli

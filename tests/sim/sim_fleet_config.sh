#!/usr/bin/env bash
# sim_fleet_config.sh: the fleet config (docs/config.md) of a simulated container world made by
# make_sim_world.sh, on standard output: one local container "200" whose agent listens on a unix
# socket, one server per GPU (SGLang on the world's python; with --engine vllm, vLLM's `vllm serve`
# on the world's venv/bin/vllm), the world's server.env as the servers'
# environment, and the world's own pip, apt-get and nvidia-smi as the container's tools (so the
# planner's fixes act on the world only). Used by deploy/demo.sh and bench/remediation/run.sh.
#
#   sim_fleet_config.sh --world DIR --socket PATH --base-port N --logs DIR [--speed X]
#                       [--comment TEXT] [--engine sglang|vllm] [--test-compile on|off]
#   sim_fleet_config.sh --world DIR --template-only NAME --log-path PATH [--speed X]
#   sim_fleet_config.sh --world DIR --tools-only
#
# The second form prints only the world's server template, as one `templates:` list item named
# NAME with PATH (with {gpu} in it) as its log path; the third only the container's `tools:`
# block: for configs with one world per container (bench/remote/run.sh).
#
# Every value is written as a YAML double-quoted string: nothing from the world is evaluated.
set -euo pipefail
# shellcheck source=deploy/lib/fleet.sh  # (shellcheck run from the repository root)
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/lib/fleet.sh"

world='' socket='' base_port='' logs='' speed='' comment="written by tests/sim/sim_fleet_config.sh"
template_only='' log_path='' tools_only=false engine=sglang test_compile=on
while [[ $# -gt 0 ]]; do
  if [[ $1 == --tools-only ]]; then
    tools_only=true
    shift
    continue
  fi
  [[ $# -ge 2 ]] || { printf 'sim_fleet_config: %s needs a value\n' "$1" >&2; exit 2; }
  case $1 in
    --world) world=$2 ;;
    --socket) socket=$2 ;;
    --base-port) base_port=$2 ;;
    --logs) logs=$2 ;;
    --speed) speed=$2 ;;
    --comment) comment=$2 ;;
    --template-only) template_only=$2 ;;
    --log-path) log_path=$2 ;;
    --engine) engine=$2 ;;
    --test-compile) test_compile=$2 ;;
    *) printf 'sim_fleet_config: unknown option %s\n' "$1" >&2; exit 2 ;;
  esac
  shift 2
done
if [[ $test_compile != on && $test_compile != off ]]; then
  printf 'sim_fleet_config: --test-compile is on or off, not %s\n' "$test_compile" >&2
  exit 2
fi
if [[ $engine != sglang && $engine != vllm ]]; then
  printf 'sim_fleet_config: --engine is sglang or vllm, not %s\n' "$engine" >&2
  exit 2
elif [[ $tools_only == true ]]; then
  [[ -n $world ]]
elif [[ -n $template_only ]]; then
  [[ -n $world && -n $log_path ]]
else
  [[ -n $world && -n $socket && $base_port =~ ^[0-9]+$ && -n $logs ]]
fi || {
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# key=value files, one a line (not shell).
declare -A conf=() server_env=()
read_kv "$world/sim-world.conf" conf
read_kv "$world/server.env" server_env
[[ -z $speed ]] || server_env[FLEET_SIM_SPEED]=$speed

# template NAME LOG_PATH: the world's server as one `templates:` list item.
template() {
  local key
  printf '  - name: %s\n    engine: %s\n' "$1" "$engine"
  printf '    model: %s\n' "$(yaml_string "${conf[model]}")"
  if [[ $engine == vllm ]]; then
    # vLLM's own command (the world's venv/bin/vllm); readiness: vLLM's default (/health and a
    # one-token completion).
    printf '    argv: [%s, serve, "{model}", --host, 127.0.0.1, --port, "{port}"]\n' \
      "$(yaml_string "${conf[vllm]}")"
  else
    printf '    argv: [%s, -m, sglang.launch_server, --model-path, "{model}", --host, 127.0.0.1, --port, "{port}"]\n' \
      "$(yaml_string "${conf[python]}")"
  fi
  printf '    env:\n'
  while IFS= read -r key; do
    printf '      %s: %s\n' "$key" "$(yaml_string "${server_env[$key]}")"
  done < <(printf '%s\n' "${!server_env[@]}" | sort)
  printf '    workdir: %s\n' "$(yaml_string "$world")"
  printf '    log_path: %s\n' "$(yaml_string "$2")"
  if [[ $engine == vllm ]]; then
    printf '    readiness: {interval: 500ms}\n'
  else
    printf '    readiness: {path: /health_generate, interval: 500ms}\n'
  fi
}

# tools: the container's `tools:` block (the world's own pip, apt-get, nvidia-smi, venv).
tools() {
  printf '        tools:\n'
  printf '          pip: [%s]\n' "$(yaml_string "${conf[pip]}")"
  printf '          apt_get: [%s]\n' "$(yaml_string "${conf[apt_get]}")"
  printf '          nvidia_smi: [%s]\n' "$(yaml_string "${conf[nvidia_smi]}")"
  printf '          venv: %s\n' "$(yaml_string "${conf[venv]}")"
  printf '          jit_cache_roots: [%s]\n' "$(yaml_string "$world/root/.cache")"
  printf '          toolkit_roots: [%s]\n' "$(yaml_string "${conf[venv]}")"
}

if [[ -n $template_only ]]; then
  template "$template_only" "$log_path"
  exit 0
fi
if [[ $tools_only == true ]]; then
  tools
  exit 0
fi

gpu_list=
for ((g = 0; g < conf[gpus]; g++)); do gpu_list+="${gpu_list:+, }$g"; done

printf '# gpu-fleet on a simulated container: %s (docs/config.md)\n' "$comment"
printf 'hosts:\n  - name: local\n    containers:\n      - ctid: "200"\n'
printf '        channel: {kind: loopback, address: %s}\n' "$(yaml_string "unix:$socket")"
printf '        gpus: [%s]\n        template: %s\n' "$gpu_list" "$engine"
printf '        base_port: %d\n' "$base_port"
tools
printf 'templates:\n'
template "$engine" "$logs/${engine}_gpu{gpu}.log"
printf 'policies:\n  - name: default\n    max_attempts: 3\n    backoff_initial: 1s\n'
# The probe's test-compile (docs/config.md preflight.test_compile) is on by default.
[[ $test_compile == on ]] || printf '    preflight: {test_compile: false}\n'

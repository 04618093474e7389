#!/usr/bin/env bash
# demo.sh: the seed scenario (docs/design.md) on a simulated container with 8 GPUs, through fleetd.
#
#   deploy/demo.sh [--state-dir DIR] [--speed X] [--build-dir DIR] [--engine sglang|vllm]
#
#   --state-dir DIR  everything of the run: fleet.db, fleetd's socket and lock, the agent's state,
#                    the sim world, the servers' logs (default ./.demo; emptied at start, and only
#                    if it is empty or a previous demo's)
#   --speed X        simulated time runs X times faster (default 2.5: about a minute in all)
#   --build-dir DIR  the CMake build to reuse or make (default build/, the one tests/run.sh makes)
#   --engine E       the servers' engine: sglang (default, `python -m sglang.launch_server`) or
#                    vllm (`vllm serve MODEL`, the simulated vLLM server of the same world: the
#                    same toolchain problems in vLLM's log shapes; readiness /health and a one-token
#                    completion)
#
# It installs the dependencies, builds fleetd, fleet-agent, fleetctl and the simulated server,
# creates a simulated container (8 GPUs) in the seed state (every problem of the cascade present),
# starts fleetd (record DIR/fleet.db, socket DIR/fleetd.sock) and the container's fleet-agent, and
# then only deploys and watches: `fleetctl deploy -f DIR/fleet.yaml` (all 8 GPUs) and `fleetctl
# status --watch --until-ready`. fleetd does the rest on its own: the preflight (the agent's probe;
# the planner fixes what is knowably broken before any launch; the probe's test-compile after
# that fix sees the PTX 9.2 its ptxas refuses, fixed in a second round before any launch), the
# canary (GPU 0 alone while the JIT cache is cold), then the other seven from the warm cache:
# 8 launches, none failed. Last `fleetctl remediations` and `fleetctl
# attempts`: every remediation with its actions, every launch with its outcome and diagnosis.
# Exits 0 only when all 8 are READY (fleetd's HTTP readiness probe: GET /health_generate gives
# 200). Stops every server, the agent and fleetd on any exit. Every wait is fleetd's own
# (`status --until-ready`), never a fixed sleep.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
source deploy/lib/fleet.sh
fleet_me=demo
fleet_step_mark='==>'

state_dir=./.demo
speed=2.5
build_dir=build
engine=sglang
while [[ $# -gt 0 ]]; do
  case $1 in
    --state-dir) [[ $# -ge 2 ]] || usage; state_dir=$2; shift ;;
    --state-dir=*) state_dir=${1#--state-dir=} ;;
    --speed) [[ $# -ge 2 ]] || usage; speed=$2; shift ;;
    --speed=*) speed=${1#--speed=} ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build_dir=$2; shift ;;
    --build-dir=*) build_dir=${1#--build-dir=} ;;
    --engine) [[ $# -ge 2 ]] || usage; engine=$2; shift ;;
    --engine=*) engine=${1#--engine=} ;;
    -h | --help) usage ;;
    *) printf 'demo: unknown argument %s\n' "$1" >&2; usage ;;
  esac
  shift
done
[[ $engine == sglang || $engine == vllm ]] || {
  printf 'demo: --engine is sglang or vllm, not %s\n' "$engine" >&2
  exit 2
}
[[ $speed =~ ^[0-9]+([.][0-9]+)?$ && ! $speed =~ ^0+([.]0+)?$ ]] || {
  printf 'demo: --speed must be a positive number, not %s\n' "$speed" >&2
  exit 2
}

readonly gpus=8
readonly canary=local/200/gpu0

if [[ -t 1 && -z ${NO_COLOR-} ]]; then
  fleet_bold=$'\e[1m'
  fleet_plain=$'\e[0m'
fi

# --- Build and state directory ----------------------------------------------------------------------

step "Dependencies (deploy/install-deps.sh)"
bash deploy/install-deps.sh

step "Build ($build_dir/: fleetd, fleet-agent, fleetctl, sglang-server-sim)"
# Configuring again is cheap and picks up folders added since the build was made.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target fleetd fleet-agent fleet-http-probe fleetctl \
  sglang-server-sim sim-free-ports
bin=$(cd -- "$build_dir" && pwd)
fleetd="$bin/daemon/fleetd"
agent="$bin/agent/fleet-agent"
fleetctl_bin="$bin/cli/fleetctl"
server_bin="$bin/tests/sim/sglang-server-sim"
free_ports="$bin/tests/sim/sim-free-ports"

# Empty the state dir, but never one that holds something else than a previous demo.
readonly marker=.gpu-fleet-demo
state_dir=$(claim_dir "$state_dir" "$marker" "the state dir" "a previous demo's state dir" \
  --state-dir)
find "$state_dir" -mindepth 1 -delete
touch "$state_dir/$marker"
logs="$state_dir/logs"
mkdir -p "$logs"
fleetctl() { "$fleetctl_bin" --state-dir "$state_dir" "$@"; }

step "A simulated container with $gpus GPUs in the seed state ($state_dir/world)"
world="$state_dir/world"
bash tests/sim/make_sim_world.sh "$world" --state seed --server "$server_bin" --gpus "$gpus"
declare -A conf=()
read_kv "$world/sim-world.conf" conf
note "python: ${conf[python]}   pip: ${conf[pip]}   apt-get: ${conf[apt_get]}"
note "$("${conf[nvidia_smi]}" -L | head -1)  (and $((gpus - 1)) more; driver CUDA $(
  "${conf[nvidia_smi]}" --version | sed -n 's/^CUDA Version *: //p'))"

# --- fleetd, the agent, the config ---------------------------------------------------------------

# Eight consecutive free loopback ports for the servers (base_port + gpu), outside the kernel's
# ephemeral range so no other program's port-0 bind takes one first.
base_port=$(free_base_port "$gpus") || base_port=
[[ -n $base_port ]] || { printf 'demo: no %d consecutive free ports found\n' "$gpus" >&2; exit 1; }

# The fleet config: the SGLang template on the world's python, its server.env, and the
# container's tools (its own pip, apt-get, nvidia-smi: the planner's fixes go through them).
write_config() {
  bash tests/sim/sim_fleet_config.sh --world "$world" --socket "$state_dir/agent.sock" \
    --base-port "$base_port" --logs "$logs" --speed "$speed" --engine "$engine" \
    --comment "written by deploy/demo.sh" >"$state_dir/fleet.yaml"
}

# stop_all (deploy/lib/fleet.sh): the servers first, through fleetd (they belong to the agent and
# outlive it), then the agent and fleetd.
pids=()
fleet_dirs=()
trap stop_all EXIT
trap 'exit 130' INT TERM

step "fleetd (record $state_dir/fleet.db) and the container's fleet-agent"
# Prometheus metrics on a loopback port the kernel picks (fleetd logs which).
"$fleetd" --state-dir "$state_dir" --metrics-listen 127.0.0.1:0 2>>"$state_dir/fleetd.log" &
pids+=("$!")
"$agent" --listen "unix:$state_dir/agent.sock" --state-dir "$state_dir/agent" --host local \
  --container 200 --readiness-interval 0.5 --stop-grace 5 --dev-root "${conf[dev_root]-}" \
  2>>"$state_dir/agent.log" &
pids+=("$!")
fleet_dirs+=("$state_dir")
note "fleetd pid ${pids[0]}, log $state_dir/fleetd.log; agent pid ${pids[1]}, log $state_dir/agent.log"
# fleetd says when it serves; wait for that line (tail follows the log with inotify; bounded).
if ! timeout 30 grep -q -m1 -F 'serving on' < <(exec tail -n +1 -F --pid="${pids[0]}" "$state_dir/fleetd.log" 2>/dev/null); then
  printf 'demo: fleetd did not start:\n' >&2
  cat "$state_dir/fleetd.log" >&2
  exit 1
fi

metrics_url=$(grep -m1 -o 'metrics: http://[^ ]*/metrics' "$state_dir/fleetd.log" | sed 's/^metrics: //' || true)
if [[ -n $metrics_url ]]; then
  note "metrics: $metrics_url (try: curl -s $metrics_url | grep '^fleet_server_state')"
  note "a Prometheus scrape config to copy (deploy/prometheus/ has the rules and a full example):"
  sed 's/^/      /' <<SCRAPE
scrape_configs:
  - job_name: gpu-fleet
    static_configs: [{targets: ["${metrics_url#http://}"]}]
    metrics_path: /metrics
  # Each READY server's own /metrics (SGLang --enable-metrics, vLLM), found through fleetd:
  - job_name: gpu-fleet-servers
    http_sd_configs: [{url: "${metrics_url}/targets"}]
rule_files: [deploy/prometheus/fleet-rules.yml]
SCRAPE
fi
write_config
note "config: $state_dir/fleet.yaml (servers on ports $base_port-$((base_port + gpus - 1)))"

# --- The deploy: fleetd does the rest --------------------------------------------------------------

step "Deploy all $gpus ($engine); fleetd probes, plans, fixes and restarts on its own"
note "preflight (the probe and its test-compile: what is knowably broken is fixed before any launch), then the canary"
note "$canary alone until it is past the JIT phase, each failure diagnosed and remediated once for"
note "the container, then the other $((gpus - 1)) from the warm JIT cache"
fleetctl deploy -f "$state_dir/fleet.yaml" | sed 's/^/    /'
outcome=0
fleetctl status --watch --until-ready || outcome=$?

step "The record: every remediation and attempt (sqlite3 $state_dir/fleet.db, docs/schema.md)"
fleetctl remediations
printf '\n'
fleetctl attempts
printf '\n'
fleetctl status -o wide
launches=$(fleetctl attempts -o json | grep -o '"number":' | wc -l || true)
note "launches: $launches for $gpus GPUs"
if [[ -n $metrics_url ]]; then
  note "metrics now ($metrics_url):"
  curl -s --max-time 5 "$metrics_url" | grep -E '^fleet_(server_state\{.*state="READY"\} 1|attempts_total)' | sed 's/^/      /' | head -20 || true
  note "the last events (fleetctl events; -o json for JSON Lines, resumable with --since N):"
  fleetctl events | tail -n 5 | sed 's/^/      /' || true
fi
if [[ $outcome == 0 ]]; then
  note "all $gpus servers READY"
  exit 0
fi
note "not every server is READY (fleetctl status --until-ready exited $outcome)"
exit 1

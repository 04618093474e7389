#!/usr/bin/env bash
# demo.sh: the seed scenario of DESIGN.md on a simulated container with 8 GPUs, end to end.
#
#   deploy/demo.sh [--state-dir DIR] [--speed X] [--build-dir DIR]
#
#   --state-dir DIR  everything of the run: the sim world, the logs (default ./.demo; emptied at
#                    start, and only if it is empty or a previous demo's)
#   --speed X        simulated time runs X times faster (default 2.5: about a minute in all)
#   --build-dir DIR  the CMake build to reuse or make (default build/, the one tests/run.sh makes)
#
# It installs the dependencies, builds what it runs (fleetctl, the simulated server), creates a
# simulated container in the seed state (every problem of the cascade present) and then:
#   1. starts the server of GPU 0; when it fails, `fleetctl explain` says why, and the fix for that
#      diagnosis is applied through the world's pip/apt-get shims and the server's environment
#      (in a later issue the daemon's remediation planner chooses and applies these fixes; this
#      script plays its part), then GPU 0 starts again, until it is READY;
#   2. starts the servers of GPUs 1-7 on ports found free at run time, and waits until all 8
#      answer GET /health_generate with 200;
#   3. prints a summary table. Exits 0 only when all 8 are READY; stops every server it started
#      on any exit.
# Waits are on the servers themselves (their exit, their log's ready line, bounded by a deadline),
# never a fixed sleep. Every attempt keeps its own log: DIR/logs/gpuN.attemptM.log.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

state_dir=./.demo
speed=2.5
build_dir=build
usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --state-dir) [[ $# -ge 2 ]] || usage; state_dir=$2; shift ;;
    --state-dir=*) state_dir=${1#--state-dir=} ;;
    --speed) [[ $# -ge 2 ]] || usage; speed=$2; shift ;;
    --speed=*) speed=${1#--speed=} ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build_dir=$2; shift ;;
    --build-dir=*) build_dir=${1#--build-dir=} ;;
    -h | --help) usage ;;
    *) printf 'demo: unknown argument %s\n' "$1" >&2; usage ;;
  esac
  shift
done
[[ $speed =~ ^[0-9]+([.][0-9]+)?$ && ! $speed =~ ^0+([.]0+)?$ ]] || {
  printf 'demo: --speed must be a positive number, not %s\n' "$speed" >&2
  exit 2
}

readonly gpus=8
readonly ready_line='The server is fired up and ready to roll!'
readonly max_attempts=8
# The longest start (a cold JIT cache) takes about 50 s at speed 1; allow four times that.
deadline=$(awk -v s="$speed" 'BEGIN { d = 200 / s; if (d < 20) d = 20; printf "%d", d }')

bold=
plain=
if [[ -t 1 && -z ${NO_COLOR-} ]]; then
  bold=$'\e[1m'
  plain=$'\e[0m'
fi
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$plain"; }
note() { printf '    %s\n' "$*"; }
now() { printf '%s' "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# --- Build and state directory ----------------------------------------------------------------------

step "Dependencies (deploy/install-deps.sh)"
bash deploy/install-deps.sh

step "Build ($build_dir/: fleetctl, sglang-server-sim, sim-free-ports)"
# Configuring again is cheap and picks up folders added since the build was made.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target fleetctl sglang-server-sim sim-free-ports
fleetctl="$repo/$build_dir/cli/fleetctl"
[[ $build_dir == /* ]] && fleetctl="$build_dir/cli/fleetctl"
sim_bin=$(dirname "$fleetctl")/../tests/sim
server_bin="$sim_bin/sglang-server-sim"
free_ports="$sim_bin/sim-free-ports"

# Empty the state dir, but never one that holds something else than a previous demo.
readonly marker=.gpu-fleet-demo
mkdir -p -- "$state_dir"
state_dir=$(cd -- "$state_dir" && pwd)
case $state_dir in
  / | "$repo" | "${HOME:-/}") printf 'demo: refusing to use %s as the state dir\n' "$state_dir" >&2; exit 1 ;;
esac
if [[ -n $(ls -A -- "$state_dir") && ! -f $state_dir/$marker ]]; then
  printf 'demo: %s is not empty and not a previous demo'"'"'s state dir; choose another --state-dir\n' \
    "$state_dir" >&2
  exit 1
fi
find "$state_dir" -mindepth 1 -delete
touch "$state_dir/$marker"
logs="$state_dir/logs"
mkdir -p "$logs"

step "A simulated container with $gpus GPUs in the seed state ($state_dir/world)"
world="$state_dir/world"
bash tests/sim/make_sim_world.sh "$world" --state seed --server "$server_bin" --gpus "$gpus"
declare -A conf=()
while IFS='=' read -r key value; do
  [[ -z $key || $key == \#* ]] || conf[$key]=$value
done <"$world/sim-world.conf"
cuda=${conf[cuda_dir]}
note "python: ${conf[python]}   pip: ${conf[pip]}   apt-get: ${conf[apt_get]}"
note "$("${conf[nvidia_smi]}" -L | head -1)  (and $((gpus - 1)) more; driver CUDA $(
  "${conf[nvidia_smi]}" --version | sed -n 's/^CUDA Version *: //p'))"

# The servers' environment: the world's server.env, then the fixes applied to it. Kept as
# key=value data and passed with `env -i`, never evaluated.
declare -A server_env=()
while IFS='=' read -r key value; do
  [[ -z $key || $key == \#* ]] || server_env[$key]=$value
done <"$world/server.env"

# --- Servers ------------------------------------------------------------------------------------------

declare -A pid_of=() port_of=() attempts_of=() first_start_of=() ready_after_of=() state_of=()
started_pids=()

# shellcheck disable=SC2317  # called through the EXIT trap
stop_all() {
  local pid
  for pid in ${started_pids[@]+"${started_pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in ${started_pids[@]+"${started_pids[@]}"}; do
    # Bounded wait for the exit, then no more patience.
    timeout 10 tail -f --pid="$pid" /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  started_pids=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# Starts GPU $1's server on a free port (attempt number in attempts_of); sets pid_of, port_of.
launch() {
  local gpu=$1 port log env_args=() key
  port=$("$free_ports" 1)
  attempts_of[$gpu]=$((${attempts_of[$gpu]:-0} + 1))
  log="$logs/gpu$gpu.attempt${attempts_of[$gpu]}.log"
  for key in "${!server_env[@]}"; do env_args+=("$key=${server_env[$key]}"); done
  : >"$log"
  env -i "${env_args[@]}" CUDA_VISIBLE_DEVICES="$gpu" FLEET_SIM_SPEED="$speed" \
    "${conf[python]}" -m sglang.launch_server --model-path "${conf[model]}" --host 127.0.0.1 \
    --port "$port" >>"$log" 2>&1 &
  pid_of[$gpu]=$!
  port_of[$gpu]=$port
  started_pids+=("$!")
  [[ -n ${first_start_of[$gpu]-} ]] || first_start_of[$gpu]=$(now)
}

log_of() { printf '%s' "$logs/gpu$1.attempt${attempts_of[$1]}.log"; }

# Waits until GPU $1's log shows the ready line (returns 0) or its server exits (1), at most
# $deadline seconds (2). tail follows the log (inotify) and ends when the server does.
wait_ready_or_exit() {
  local gpu=$1 pid=${pid_of[$1]} log follow follower found=0
  log=$(log_of "$gpu")
  exec {follow}< <(exec timeout "$deadline" tail -n +1 -f -s 0.1 --pid="$pid" "$log")
  follower=$!
  grep -q -m1 -F "$ready_line" <&"$follow" && found=1
  exec {follow}<&-
  kill "$follower" 2>/dev/null || true
  [[ $found == 1 ]] && return 0
  kill -0 "$pid" 2>/dev/null && return 2
  return 1
}

# The HTTP status of GET $2 on 127.0.0.1:$1 (bash's /dev/tcp: no curl needed).
http_status() {
  local port=$1 path=$2 fd status=000 _version _rest
  if exec {fd}<>"/dev/tcp/127.0.0.1/$port"; then
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&"$fd"
    IFS=' ' read -r -t 10 _version status _rest <&"$fd" || true
    exec {fd}<&-
  fi
  printf '%s' "$status"
}

# The class of a diagnosis, from `fleetctl explain -o json` (one JSON object).
diagnosis_class() {
  "$fleetctl" explain -o json "$1" | grep -o '"class":"[a-z_]*"' | head -1 | cut -d'"' -f4
}

prepend_env() {  # NAME DIR: DIR first on the list variable NAME
  server_env[$1]="$2${server_env[$1]:+:${server_env[$1]}}"
}

# The fix for a diagnosis, as the remediation planner will choose it: typed actions through the
# world's own pip/apt-get and the servers' environment. Returns 1 when there is none to apply.
apply_fix() {
  case $1 in
    missing_shared_library)
      note "PrependPath LD_LIBRARY_PATH $cuda/lib   (the pip CUDA libraries onto the loader path)"
      prepend_env LD_LIBRARY_PATH "$cuda/lib"
      ;;
    nvcc_not_found)
      note "PipInstall nvidia-cuda-nvcc==13.2.78; SetEnv CUDA_HOME=$cuda; PrependPath PATH $cuda/bin"
      "${conf[pip]}" install -q nvidia-cuda-nvcc==13.2.78
      server_env[CUDA_HOME]=$cuda
      prepend_env PATH "$cuda/bin"
      ;;
    ninja_not_found)
      note "AptInstall ninja-build   (the JIT build tool onto the server's PATH)"
      "${conf[apt_get]}" install -y -q ninja-build | sed 's/^/      apt-get: /'
      ;;
    cuda_header_mismatch | ptx_version_unsupported)
      # Both constraints at once (compiler = headers, ptxas >= the PTX 9.2 flashinfer's CCCL
      # emits): one remediation instead of the 13.0/13.2 seesaw.
      note "PipInstall the whole CUDA 13.2 set in one go (compiler = headers, ptxas accepts PTX 9.2):"
      note "  nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm nvidia-cuda-runtime nvidia-cuda-nvrtc nvidia-cuda-cupti"
      "${conf[pip]}" install -q nvidia-cuda-nvcc==13.2.78 nvidia-cuda-crt==13.2.78 nvidia-nvvm==13.2.78 \
        nvidia-cuda-runtime==13.2.75 nvidia-cuda-nvrtc==13.2.78 nvidia-cuda-cupti==13.2.75
      ;;
    link_error)
      note "Symlink lib64 -> lib; libcudart.so -> libcudart.so.13; lib64/stubs/libcuda.so -> the driver's libcuda.so.1"
      ln -sfn lib "$cuda/lib64"
      ln -sf libcudart.so.13 "$cuda/lib/libcudart.so"
      mkdir -p "$cuda/lib/stubs"
      ln -sf "${conf[driver_libcuda]}" "$cuda/lib/stubs/libcuda.so"
      ;;
    *)
      return 1
      ;;
  esac
}

# --- 1. GPU 0 until READY -------------------------------------------------------------------------------

step "GPU 0: start, explain each failure, fix it, start again"
note "(in a later issue fleetd's remediation planner chooses and applies each fix; this script plays its part)"
while :; do
  launch 0
  attempt=${attempts_of[0]}
  started=$(now)
  printf '\n%s-- GPU 0, attempt %d (port %s, log %s)%s\n' "$bold" "$attempt" "${port_of[0]}" \
    "$(log_of 0)" "$plain"
  outcome=0
  wait_ready_or_exit 0 || outcome=$?
  if [[ $outcome == 0 ]]; then
    note "READY after $(elapsed "$started" "$(now)") s"
    break
  fi
  if [[ $outcome == 2 ]]; then
    note "no ready line and no exit within $deadline s: giving up"
    exit 1
  fi
  status=0
  wait "${pid_of[0]}" || status=$?
  note "the server exited with status $status after $(elapsed "$started" "$(now)") s$(
    [[ $status == 0 ]] && printf ' (SGLang'"'"'s sigquit path exits 0: the log says it failed)')"
  printf '\n'
  "$fleetctl" explain "$(log_of 0)" | cut -c1-220 | sed 's/^/    | /'
  class=$(diagnosis_class "$(log_of 0)")
  printf '\n'
  note "diagnosis: $class"
  if ! apply_fix "$class"; then
    note "no toolchain fix for $class: reported, not fixed; giving up"
    exit 1
  fi
  if [[ $attempt -ge $max_attempts ]]; then
    note "still failing after $attempt attempts: giving up"
    exit 1
  fi
done
ready_after_of[0]=$(elapsed "${first_start_of[0]}" "$(now)")

# --- 2. All GPUs ----------------------------------------------------------------------------------------

step "GPUs 1-$((gpus - 1)): start with the fixed toolchain (the JIT cache is warm from GPU 0)"
for ((gpu = 1; gpu < gpus; gpu++)); do
  launch "$gpu"
  note "GPU $gpu: port ${port_of[$gpu]}, log $(log_of "$gpu")"
done
for ((gpu = 1; gpu < gpus; gpu++)); do
  outcome=0
  wait_ready_or_exit "$gpu" || outcome=$?
  if [[ $outcome == 0 ]]; then
    ready_after_of[$gpu]=$(elapsed "${first_start_of[$gpu]}" "$(now)")
  else
    note "GPU $gpu did not become ready: $("$fleetctl" explain "$(log_of "$gpu")" | head -1)"
  fi
done

step "Readiness: GET /health_generate on every server"
all_ready=1
for ((gpu = 0; gpu < gpus; gpu++)); do
  code=$(http_status "${port_of[$gpu]}" /health_generate)
  if [[ $code == 200 && -n ${ready_after_of[$gpu]-} ]]; then
    state_of[$gpu]=READY
  else
    state_of[$gpu]="NOT READY (HTTP $code)"
    all_ready=0
  fi
done

step "Summary"
printf '    %-4s %-6s %-9s %-14s %s\n' GPU PORT ATTEMPTS "TIME TO READY" STATE
launches=0
for ((gpu = 0; gpu < gpus; gpu++)); do
  launches=$((launches + attempts_of[$gpu]))
  printf '    %-4s %-6s %-9s %-14s %s\n' "$gpu" "${port_of[$gpu]}" "${attempts_of[$gpu]}" \
    "${ready_after_of[$gpu]:--} s" "${state_of[$gpu]}"
done
note "$launches launches for $gpus GPUs; logs in $logs"
if [[ $all_ready == 1 ]]; then
  note "all $gpus servers READY"
  exit 0
fi
note "not every server is READY"
exit 1

#!/usr/bin/env bash
# gpu-run.sh: gpu-fleet supervising real JIT-compiling servers on this machine's GPUs.
#
#   deploy/gpu-run.sh --bin DIR [--out DIR] [--only NAME]... [--timeout SECONDS]
#                     [--python PATH] [--gpus LIST] [--max-attempts N] [--list]
#
#   --bin DIR          prebuilt gpu-fleet binaries: fleetd, fleet-agent, fleet-http-probe,
#                      fleetctl (this script builds nothing)
#   --out DIR          everything of the run (default ./gpu-run-out): one folder per scenario
#                      (fleet.yaml; state/ with fleet.db and fleetd's and the agent's logs; the
#                      servers' logs; deploy/status/attempts/remediations/explain outputs;
#                      result.txt), jit/ and toolkits/ (per-scenario JIT caches and toolkit
#                      copies), env.txt, summary.txt. A scenario's folder is replaced when it
#                      runs again; the others are kept, so summary.txt covers every scenario run
#   --only NAME        run only this scenario (repeatable, or a comma list); NAME or its letter
#   --timeout SECONDS  per scenario: how long `fleetctl status --until-ready` may wait (1200)
#   --python PATH      the python with PyTorch (default: python3 on PATH)
#   --gpus LIST        GPU indexes, e.g. 0,1 (default: every GPU nvidia-smi lists)
#   --max-attempts N   the policy's attempts per server per deploy (3)
#   --list             list the scenarios and exit
#
# Scenarios, each a fresh deploy of deploy/examples/real-gpu/server.py on every GPU, its JIT cache
# (TORCH_EXTENSIONS_DIR) cold:
#   a clean          no fault: every GPU READY
#   b no_ninja       ninja is not on the servers' PATH           -> ninja_not_found
#   c bad_cuda_home  CUDA_HOME names no toolkit                  -> nvcc_not_found
#   d ptx_newer      ptxas is handed PTX one ISA above its own   -> ptx_version_unsupported
#   e needs_stub     CUDA_HOME is a copy of the toolkit without lib64/stubs/libcuda.so, and the
#                    extension links -lcuda                      -> link_error
#   f oom            GPU memory exhausted on one GPU (the last)  -> cuda_out_of_memory, no fix
#   g combo          b + c + e together
#   h leftover       a server killed (SIGKILL) while a child it forked, in a process group of its
#                    own, still holds GPU memory; a bystander outside fleet holds 2 GiB more for a
#                    while. The relaunch must find the GPU busy, kill only the server's own
#                    leftover, report the bystander (never signal it), wait for its memory, start
#   i pci_order      one server on a GPU whose index differs between CUDA's default order
#                    (fastest first) and PCI order (nvidia-smi's): the server must run on
#                    nvidia-smi's GPU of that index. Only meaningful with GPUs of different kinds:
#                    on a machine where both orders agree it says so and skips
# h and i run on the first GPU of --gpus (h) or the one GPU that shows the difference (i).
# For each: `fleetctl deploy -f`, `fleetctl status --watch --until-ready` (bounded), then
# `fleetctl attempts -o json`, `fleetctl remediations -o json` (where the verb exists),
# `fleetctl explain --server S --attempt N -o json` of every failed attempt, `fleetctl stop --all`
# and a wait until nothing runs. The planner's fixes are fleetd's: this script only records.
#
# Each scenario gets its own fleetd and fleet-agent (container "gpu", unix sockets) and record, so
# no attempt budget, fix or cache carries over from one to the next; every server, the agent and
# fleetd are stopped at the scenario's end and on any exit, and keeps NVLink multicast off everywhere (NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1). Exit status: 0 when every scenario
# ran (whatever its outcome), 1 when the machine lacks something, 2 for a usage error.
set -euo pipefail

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=deploy/lib/fleet.sh  # (shellcheck run from the repository root)
source "$repo/deploy/lib/fleet.sh"
fleet_me=gpu-run
fleet_step_mark='==>'
server_py=$repo/deploy/examples/real-gpu/server.py

readonly all_scenarios=(clean no_ninja bad_cuda_home ptx_newer needs_stub oom combo leftover
  pci_order)
declare -A letter_of=([clean]=a [no_ninja]=b [bad_cuda_home]=c [ptx_newer]=d [needs_stub]=e
  [oom]=f [combo]=g [leftover]=h [pci_order]=i)
declare -A what_of=(
  [clean]="no fault: every GPU READY"
  [no_ninja]="ninja not on the servers' PATH (expect ninja_not_found)"
  [bad_cuda_home]="CUDA_HOME names no toolkit (expect nvcc_not_found)"
  [ptx_newer]="ptxas handed PTX one ISA above its own (expect ptx_version_unsupported)"
  [needs_stub]="toolkit copy without the libcuda stub, extension links -lcuda (expect link_error)"
  [oom]="GPU memory exhausted on the last GPU (expect cuda_out_of_memory, no toolchain action)"
  [combo]="no ninja + wrong CUDA_HOME + missing libcuda stub together"
  [leftover]="server killed while its child holds GPU memory (expect: leftover killed, bystander reported, relaunch READY)"
  [pci_order]="GPU index where CUDA's default order and PCI order differ (skipped when they agree)"
)


bin_dir=
out=./gpu-run-out
only=()
timeout_s=1200
python=
gpu_list=
max_attempts=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) [[ $# -ge 2 ]] || usage; bin_dir=$2; shift ;;
    --bin=*) bin_dir=${1#--bin=} ;;
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --only) [[ $# -ge 2 ]] || usage; IFS=, read -ra more <<<"$2"; only+=("${more[@]}"); shift ;;
    --only=*) IFS=, read -ra more <<<"${1#--only=}"; only+=("${more[@]}") ;;
    --timeout) [[ $# -ge 2 ]] || usage; timeout_s=$2; shift ;;
    --timeout=*) timeout_s=${1#--timeout=} ;;
    --python) [[ $# -ge 2 ]] || usage; python=$2; shift ;;
    --python=*) python=${1#--python=} ;;
    --gpus) [[ $# -ge 2 ]] || usage; gpu_list=$2; shift ;;
    --gpus=*) gpu_list=${1#--gpus=} ;;
    --max-attempts) [[ $# -ge 2 ]] || usage; max_attempts=$2; shift ;;
    --max-attempts=*) max_attempts=${1#--max-attempts=} ;;
    --list)
      for name in "${all_scenarios[@]}"; do
        printf '%s %-14s %s\n' "${letter_of[$name]}" "$name" "${what_of[$name]}"
      done
      exit 0
      ;;
    -h | --help) usage ;;
    *) printf 'gpu-run: unknown argument %s\n' "$1" >&2; usage ;;
  esac
  shift
done
[[ -n $bin_dir ]] || { printf 'gpu-run: --bin DIR is required\n' >&2; usage; }
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || { printf 'gpu-run: --timeout must be seconds\n' >&2; exit 2; }
[[ $max_attempts =~ ^[1-9][0-9]*$ ]] || { printf 'gpu-run: bad --max-attempts\n' >&2; exit 2; }

# The scenarios to run, in the table's order.
selected=()
if [[ ${#only[@]} -eq 0 ]]; then
  selected=("${all_scenarios[@]}")
else
  for name in "${all_scenarios[@]}"; do
    for want in "${only[@]}"; do
      if [[ $want == "$name" || $want == "${letter_of[$name]}" ]]; then
        selected+=("$name")
        break
      fi
    done
  done
  for want in "${only[@]}"; do
    known=0
    for name in "${all_scenarios[@]}"; do
      [[ $want == "$name" || $want == "${letter_of[$name]}" ]] && known=1
    done
    [[ $known == 1 ]] || { printf 'gpu-run: unknown scenario %s (see --list)\n' "$want" >&2; exit 2; }
  done
fi

# --- The machine -----------------------------------------------------------------------------------

step "Checks: binaries, nvidia-smi, nvcc, ninja, PyTorch"
bin_dir=$(cd -- "$bin_dir" 2>/dev/null && pwd) || die "--bin: no such directory"
for b in fleetd fleet-agent fleet-http-probe fleetctl; do
  [[ -x $bin_dir/$b ]] || die "$bin_dir/$b: missing or not executable"
done
[[ -f $server_py ]] || die "$server_py: missing"
nvidia_smi=$(command -v nvidia-smi) || die "nvidia-smi is not on PATH"
if [[ -z $gpu_list ]]; then
  gpu_list=$("$nvidia_smi" --query-gpu=index --format=csv,noheader | tr -d ' ' | paste -sd, -) ||
    die "nvidia-smi could not list the GPUs"
fi
IFS=, read -ra gpus <<<"$gpu_list"
[[ ${#gpus[@]} -gt 0 ]] || die "no GPUs"
for g in "${gpus[@]}"; do [[ $g =~ ^[0-9]+$ ]] || die "bad GPU index '$g'"; done
last_gpu=${gpus[${#gpus[@]}-1]}

nvcc=
if [[ -n ${CUDA_HOME-} && -x ${CUDA_HOME-}/bin/nvcc ]]; then
  nvcc=$CUDA_HOME/bin/nvcc
elif command -v nvcc >/dev/null; then
  nvcc=$(command -v nvcc)
elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
  nvcc=/usr/local/cuda/bin/nvcc
fi
[[ -n $nvcc ]] || die "no nvcc (CUDA_HOME, PATH, /usr/local/cuda)"
cuda_home=$(cd -- "$(dirname -- "$nvcc")/.." && pwd)  # as named (/usr/local/cuda), not resolved
ninja=$(command -v ninja) || die "ninja is not on PATH"
python=${python:-$(command -v python3)} || die "no python3 on PATH (--python PATH)"
# The interpreter itself, not a wrapper (a pyenv shim needs its own environment); a venv's
# bin/python stays as named, so the agent still sees the venv.
python=$("$python" -c 'import sys; print(sys.executable)') || die "$python does not run"
torch_info=$("$python" -c 'import sys, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices",
      torch.cuda.device_count(), "python", sys.version.split()[0])
sys.exit(0 if torch.cuda.is_available() else 3)') ||
  die "$python: PyTorch is not importable or sees no GPU"

note "GPUs: ${gpus[*]}  ($("$nvidia_smi" --query-gpu=name --format=csv,noheader | head -1))"
note "nvcc: $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))  CUDA_HOME: $cuda_home"
note "ninja: $ninja ($("$ninja" --version))"
note "python: $python: $torch_info"

# --- The output folder -----------------------------------------------------------------------------

readonly marker=.gpu-fleet-gpu-run
mkdir -p -- "$out"
out=$(cd -- "$out" && pwd)
case $out in
  / | "$repo" | "${HOME:-/}") die "refusing to use $out as --out" ;;
esac
if [[ -n $(ls -A -- "$out") && ! -f $out/$marker ]]; then
  die "$out is not empty and not a previous gpu-run's folder; choose another --out"
fi
touch "$out/$marker"
mkdir -p "$out/jit" "$out/toolkits"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -a
  "$nvidia_smi" -L
  "$nvidia_smi" --query-gpu=index,name,driver_version,memory.total --format=csv
  "$nvcc" --version
  printf 'ninja %s %s\n' "$ninja" "$("$ninja" --version)"
  printf 'python %s: %s\n' "$python" "$torch_info"
  printf 'bin %s\n' "$bin_dir"
  "$bin_dir/fleetd" --version 2>&1 || true
} >"$out/env.txt" 2>&1

# Unix sockets have a short path limit: they live in a short temporary folder.
sock_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-fleet.XXXXXX")
run_id="gpu-run-$(date +%s)-$$"  # in every server's environment: how leftovers are found
sock=  # the current scenario's socket folder, below sock_dir
fleetctl() { "$bin_dir/fleetctl" --socket "$sock/fleetd.sock" "$@"; }

# --- Cleanup -------------------------------------------------------------------------------------

pids=()
watcher=  # a `fleetctl status --watch` in the background, while one runs
# Polls fleetd until no server runs (every one STOPPED or GAVE_UP); bounded.
wait_all_stopped() {
  local tries
  for ((tries = 0; tries < ${1:-300}; tries++)); do
    if fleetctl --timeout 5s status -o json 2>/dev/null | "$python" -c '
import json, sys
rows = json.load(sys.stdin).get("servers", [])
sys.exit(0 if all(r.get("state") in ("STOPPED", "GAVE_UP") for r in rows) else 1)'; then
      return 0
    fi
    sleep 0.5  # a poll interval, not a synchronisation guess
  done
  return 1
}
# True when every server is READY, GAVE_UP or STOPPED (nothing left to wait for).
all_settled() {
  fleetctl --timeout 5s status -o json 2>/dev/null | "$python" -c '
import json, sys
rows = json.load(sys.stdin).get("servers", [])
sys.exit(0 if rows and all(r.get("state") in ("READY", "GAVE_UP", "STOPPED") for r in rows) else 1)'
}
# Servers of this run that are still alive (FLEET_RUN_ID in their environment), by pid.
leftover_servers() {
  local environ pid
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    if tr '\0' '\n' 2>/dev/null <"$environ" | grep -qxF "FLEET_RUN_ID=$run_id"; then
      printf '%s\n' "$pid"
    fi
  done
}
# Stops the servers (through fleetd), then the agent and fleetd.
stop_daemons() {
  local pid
  [[ -z $watcher ]] || kill -TERM "$watcher" 2>/dev/null || true
  if [[ ${#pids[@]} -gt 0 ]]; then
    if fleetctl --timeout 10s stop --all >/dev/null 2>&1; then wait_all_stopped 120 || true; fi
  fi
  for pid in ${pids[@]+"${pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in ${pids[@]+"${pids[@]}"}; do
    timeout 20 tail -f --pid="$pid" /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  local left
  trap - EXIT
  stop_daemons
  left=$(leftover_servers)
  if [[ -n $left ]]; then
    printf 'gpu-run: stopping leftover servers: %s\n' "${left//$'\n'/ }" >&2
    # shellcheck disable=SC2086  # a list of pids
    kill -TERM $left 2>/dev/null || true
  fi
  rm -rf -- "$sock_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits (bounded) for a line containing TEXT in FILE, written by process PID.
wait_for_line() {  # FILE TEXT PID SECONDS
  timeout "$4" grep -q -m1 -F "$2" < <(exec tail -n +1 -F --pid="$3" "$1" 2>/dev/null)
}

# --- fleetd and the agent --------------------------------------------------------------------------

# fleetd (record STATE/fleet.db) and the container's fleet-agent, their sockets in $sock.
start_daemons() {  # STATE
  local state=$1
  mkdir -p "$state" "$sock"
  "$bin_dir/fleetd" --state-dir "$state" --socket "$sock/fleetd.sock" 2>>"$state/fleetd.log" &
  pids+=("$!")
  wait_for_line "$state/fleetd.log" 'serving on' "${pids[0]}" 60 ||
    { cat "$state/fleetd.log" >&2; die "fleetd did not start"; }
  "$bin_dir/fleet-agent" --listen "unix:$sock/agent.sock" --state-dir "$state/agent" \
    --host local --container gpu --http-probe "$bin_dir/fleet-http-probe" \
    --readiness-interval 1 --stop-grace 15 \
    --jit-cache-root "$out/jit" --toolkit-root "$out/toolkits" 2>>"$state/agent.log" &
  pids+=("$!")
  wait_for_line "$state/agent.log" 'serving' "${pids[1]}" 60 ||
    { cat "$state/agent.log" >&2; die "fleet-agent did not start"; }
  note "fleetd pid ${pids[0]}, agent pid ${pids[1]}, record and logs in $state/"
}

# --- Scenario pieces -------------------------------------------------------------------------------

# base_port: ${#gpus[@]} consecutive loopback ports that are free now (max index + 1, really).
max_gpu=0
for g in "${gpus[@]}"; do
  if ((g > max_gpu)); then max_gpu=$g; fi
done
# (Python's sockets: the bundle has no sim-free-ports.)
python_free_base_port() {
  "$python" - "$((max_gpu + 1))" <<'EOF'
import socket, sys
n = int(sys.argv[1])
for _ in range(50):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); base = s.getsockname()[1]; s.close()
    if base + n >= 65536:
        continue
    ok = True
    for p in range(base, base + n):
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", p))
        except OSError:
            ok = False
        finally:
            t.close()
    if ok:
        print(base); sys.exit(0)
sys.exit(1)
EOF
}

# A copy of the CUDA toolkit made of links, with lib64 and lib64/stubs as real folders and no
# lib64/stubs/libcuda.so: what a pip-installed toolkit looks like to a link that needs -lcuda. The
# fix (a link stubs/libcuda.so -> the driver's libcuda.so.1, or the toolkit's stub) goes inside
# it, below the agent's --toolkit-root.
make_toolkit_copy() {  # DEST
  local dest=$1 real lib64 entry name
  real=$(readlink -f -- "$cuda_home")
  lib64=$(readlink -f -- "$real/lib64")
  mkdir -p "$dest/bin" "$dest/lib64/stubs"
  for entry in "$real"/*; do
    name=${entry##*/}
    case $name in
      bin | lib64) continue ;;
      lib) [[ $(readlink -f -- "$entry") == "$lib64" ]] && continue ;;  # lib64's other name
    esac
    ln -s "$entry" "$dest/$name"
  done
  for entry in "$real"/bin/*; do ln -s "$entry" "$dest/bin/"; done
  for entry in "$lib64"/*; do [[ ${entry##*/} == stubs ]] || ln -s "$entry" "$dest/lib64/"; done
  for entry in "$lib64"/stubs/*; do
    [[ -e $entry && ${entry##*/} != libcuda.so ]] && ln -s "$entry" "$dest/lib64/stubs/"
  done
  return 0
}

# PATH with every folder that holds ninja replaced by a folder of links to all else it holds.
path_without_ninja() {  # PATH DEST
  local dir new='' i=0 entry
  local -a dirs
  IFS=: read -ra dirs <<<"$1"
  for dir in "${dirs[@]}"; do
    if [[ -n $dir && -x $dir/ninja ]]; then
      i=$((i + 1))
      mkdir -p "$2/$i"
      for entry in "$dir"/*; do [[ ${entry##*/} == ninja ]] || ln -s "$entry" "$2/$i/"; done
      new+=$2/$i:
    else
      new+=$dir:
    fi
  done
  printf '%s' "${new%:}"
}

# The servers' environment before a scenario changes it: exactly this (nothing is inherited by
# a server), so what the toolchain needs from this shell is copied in. LIBRARY_PATH is left out
# on purpose: a stub on it would hide the needs_stub fault.
declare -A base_env=(
  [PATH]=$PATH
  [HOME]=${HOME:-/root}
  [CUDA_HOME]=$cuda_home
  [PYTHONUNBUFFERED]=1
  [NCCL_NVLS_ENABLE]=0
  [TORCH_SYMM_MEM_DISABLE_MULTICAST]=1
  [NVSHMEM_DISABLE_NVLS]=1
  [FLEET_RUN_ID]=$run_id
)
for var in LD_LIBRARY_PATH CC CXX CUDAHOSTCXX PYTHONPATH TORCH_CUDA_ARCH_LIST MAX_JOBS TMPDIR \
  LANG LC_ALL USER; do
  [[ -n ${!var-} ]] && base_env[$var]=${!var}
done

declare -A env=()
scenario_env() {  # NAME SCENARIO_DIR: fills env
  local name=$1 sdir=$2 toolkit=$out/toolkits/$1/cuda key
  env=()
  for key in "${!base_env[@]}"; do env[$key]=${base_env[$key]}; done
  env[TORCH_EXTENSIONS_DIR]=$out/jit/$name
  case $name in
    clean) ;;
    no_ninja) env[PATH]=$(path_without_ninja "${env[PATH]}" "$sdir/no-ninja") ;;
    bad_cuda_home) env[CUDA_HOME]=$sdir/no-cuda-here ;;
    ptx_newer) env[FLEET_GPU_FAULT]=ptx_newer ;;
    needs_stub)
      make_toolkit_copy "$toolkit"
      env[CUDA_HOME]=$toolkit
      env[PATH]=$toolkit/bin:${env[PATH]}
      env[FLEET_GPU_FAULT]=needs_stub
      ;;
    oom) env[FLEET_GPU_FAULT]=oom@$last_gpu ;;
    leftover) env[FLEET_GPU_FAULT]=leftover@${scenario_gpus[0]} ;;
    combo)
      make_toolkit_copy "$toolkit"
      env[PATH]=$(path_without_ninja "$toolkit/bin:${env[PATH]}" "$sdir/no-ninja")
      env[CUDA_HOME]=$sdir/no-cuda-here
      env[FLEET_GPU_FAULT]=needs_stub
      ;;
  esac
}

write_config() {  # NAME SCENARIO_DIR BASE_PORT
  local name=$1 sdir=$2 key sep=
  {
    printf '# gpu-fleet real-GPU run, scenario %s: written by deploy/gpu-run.sh (docs/config.md)\n' "$name"
    printf 'hosts:\n  - name: local\n    containers:\n      - ctid: "gpu"\n'
    printf '        channel: {kind: loopback, address: %s}\n' "$(yaml_string "unix:$sock/agent.sock")"
    printf '        gpus: ['
    for g in "${scenario_gpus[@]}"; do printf '%s%s' "$sep" "$g"; sep=', '; done
    printf ']\n        template: real\n'
    printf '        base_port: %d\n' "$3"
    printf '        tools:\n'
    printf '          nvidia_smi: [%s]\n' "$(yaml_string "$nvidia_smi")"
    printf '          jit_cache_roots: [%s]\n' "$(yaml_string "$out/jit")"
    printf '          toolkit_roots: [%s]\n' "$(yaml_string "$out/toolkits")"
    # Where the probe may find this machine's ninja and CUDA toolkit when a server's PATH or
    # CUDA_HOME misses them: the planner points the server at them instead of installing.
    printf '          search_path: [%s, %s]\n' "$(yaml_string "$cuda_home/bin")" \
      "$(yaml_string "$(dirname -- "$ninja")")"
    printf 'templates:\n  - name: real\n    engine: sglang\n'
    printf '    argv: [%s, %s, --model-path, random, --host, 127.0.0.1, --port, "{port}"]\n' \
      "$(yaml_string "$python")" "$(yaml_string "$server_py")"
    printf '    env:\n'
    for key in $(printf '%s\n' "${!env[@]}" | sort); do
      printf '      %s: %s\n' "$key" "$(yaml_string "${env[$key]}")"
    done
    printf '    workdir: %s\n' "$(yaml_string "$repo")"
    printf '    log_path: %s\n' "$(yaml_string "$sdir/logs/server_gpu{gpu}.log")"
    printf '    readiness: {path: /health_generate, interval: 1s}\n'
    printf 'policies:\n  - name: default\n    remediation: auto\n'
    # This machine reaches no package registry: no pip or apt installs, the rest is allowed.
    printf '    allowed_actions: [set_env, prepend_path, symlink, clear_jit_cache, add_server_args, remove_server_args]\n'
    printf '    max_attempts: %d\n    backoff_initial: 2s\n' "$max_attempts"
    printf '    stall_timeout: 5m\n    startup_deadline: 20m\n'
  } >"$sdir/fleet.yaml"
}

# Reads a scenario's JSON outputs; writes result.txt (the summary's part) and failed.tsv (the
# failed attempts of this scenario: SERVER<TAB>NUMBER) into the scenario's folder.
analyse() {  # SCENARIO_DIR NAME T0 T1 WATCH_RC
  "$python" - "$@" <<'EOF'
import datetime, json, os, sys
from collections import Counter, OrderedDict

sdir, name, t0, t1, watch_rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]

def load(fname):
    try:
        with open(os.path.join(sdir, fname)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def rows(doc, key):
    if isinstance(doc, dict):
        if isinstance(doc.get(key), list):
            return doc[key]
        for v in doc.values():  # the remediations verb is new: take its first list
            if isinstance(v, list):
                return v
    return doc if isinstance(doc, list) else []

def ident(r):
    return r.get("id") if isinstance(r, dict) and r.get("id") else json.dumps(r, sort_keys=True)

def when(s):
    try:
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None

before = {ident(r) for r in rows(load("attempts.before.json"), "attempts")}
attempts = [r for r in rows(load("attempts.json"), "attempts") if ident(r) not in before]
rem_doc = load("remediations.json")
rem_before = {ident(r) for r in rows(load("remediations.before.json"), "remediations")}
rems = [r for r in rows(rem_doc, "remediations") if ident(r) not in rem_before]
status = rows(load("status.json"), "servers")

out = [f"== {name}  (watch exit {watch_rc}, {t1 - t0:.0f} s)"]
per = OrderedDict()
for r in sorted(attempts, key=lambda r: (r.get("server", ""), r.get("number", 0))):
    per.setdefault(r.get("server", "?"), []).append(r)
state_of = {r.get("server"): r for r in status}
servers = sorted(set(per) | set(state_of), key=lambda s: (len(s), s))
out.append("  server             state         launches  time-to-ready  attempts (outcome/class)")
for s in servers:
    atts = per.get(s, [])
    ttr = "-"
    for r in atts:
        start, ms = when(r.get("started_at")), r.get("time_to_ready_ms")
        if start is not None and ms is not None:
            ttr = f"{start + ms / 1000.0 - t0:.1f} s"
            break
    trail = ", ".join(f"#{r.get('number')} {r.get('outcome')}"
                      + (f"/{r['diagnosis_class']}" if r.get("diagnosis_class") else "")
                      + (f" [{r['trigger']}]" if r.get("trigger") not in (None, "", "initial") else "")
                      for r in atts)
    st = state_of.get(s, {})
    out.append(f"  {s:<18} {st.get('state', '?'):<13} {len(atts):>8}  {ttr:>13}  {trail}")
    if st.get("reason"):
        out.append(f"  {'':<18} reason: {st['reason'][:300]}")
classes = Counter(r.get("diagnosis_class") for r in attempts if r.get("diagnosis_class"))
out.append(f"  launches: {len(attempts)}; diagnosis classes: "
           + (", ".join(f"{c} x{n}" for c, n in classes.most_common()) or "none"))
if rem_doc is None:
    out.append("  remediations: (fleetctl remediations gave no JSON; see remediations.err)")
else:
    out.append(f"  remediations: {len(rems)}")
    for r in rems:
        if isinstance(r, dict):
            keys = ("id", "trigger", "container", "server", "diagnosis_class", "class", "cause",
                    "status", "outcome", "state")
            head = " ".join(f"{k}={r[k]}" for k in keys if r.get(k) not in (None, "", []))
            acts = r.get("actions") or []
            desc = "; ".join((a.get("summary") or a.get("kind") or a.get("type") or json.dumps(a))
                             if isinstance(a, dict) else str(a) for a in acts)
            out.append(f"    - {head}" + (f"  actions: {desc[:400]}" if desc else ""))
        else:
            out.append(f"    - {json.dumps(r)[:400]}")
# Detection latency, from fleetd's record of the agent's events: when fleetd held the first
# (provisional) diagnosis of each failed attempt, against the server process's exit as the agent
# saw it (negative: the cause was known before the process ended), and the agent-to-fleetd lag.
try:
    import sqlite3
    db = sqlite3.connect(f"file:{os.path.join(sdir, 'state', 'fleet.db')}?mode=ro", uri=True)
    for r in attempts:
        if r.get("outcome") not in ("failed", "lost") or not r.get("id"):
            continue
        ev = {}
        for kind, at, received in db.execute(
                "SELECT kind, at, received_at FROM events WHERE attempt_id = ? AND kind IN "
                "('provisional_diagnosis', 'diagnosis', 'exited') ORDER BY id", (r["id"],)):
            ev.setdefault(kind, (when(at), when(received)))
        first = ev.get("provisional_diagnosis") or ev.get("diagnosis")
        exited = ev.get("exited")
        if first is None or None in first:
            out.append(f"  detection {r.get('server')} #{r.get('number')}: no diagnosis event")
            continue
        text = f"  detection {r.get('server')} #{r.get('number')}: diagnosis at fleetd"
        if exited is not None and exited[0] is not None:
            text += f" {(first[1] - exited[0]) * 1000:+.0f} ms from the process exit,"
        text += f" agent-to-fleetd {(first[1] - first[0]) * 1000:.1f} ms"
        out.append(text)
except Exception as e:  # the record is optional for the summary
    out.append(f"  detection: fleet.db unreadable ({e})")
with open(os.path.join(sdir, "result.txt"), "w") as f:
    f.write("\n".join(out) + "\n")
with open(os.path.join(sdir, "failed.tsv"), "w") as f:
    for r in attempts:
        if r.get("outcome") in ("failed", "lost") or r.get("diagnosis_class"):
            f.write(f"{r.get('server')}\t{r.get('number')}\n")
print("\n".join(out))
EOF
}

# --- Scenarios h and i: the GPU check before a launch, and which GPU an index names -------------

# The GPUs a scenario deploys on: all of --gpus, or one for h and i.
scenario_gpus=("${gpus[@]}")

smi_used() {  # GPU: memory.used in MiB, as the agent reads it
  "$nvidia_smi" --query-gpu=memory.used --format=csv,noheader,nounits -i "$1" 2>/dev/null | tr -d ' '
}
server_state() {  # SERVER: its state in fleetd's status
  fleetctl --timeout 5s status -o json 2>/dev/null | "$python" -c '
import json, sys
rows = [r for r in json.load(sys.stdin).get("servers", []) if r.get("server") == sys.argv[1]]
print(rows[0].get("state", "") if rows else "")' "$1"
}
# Pids of this run's processes on GPU $1: with $2 = yes the leftover children
# (FLEET_GPU_LEFTOVER=1), with $2 = no the servers themselves (session leaders without the mark).
run_pids_on_gpu() {  # GPU yes|no
  local environ pid vars stat rest
  local -a f
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    vars=$(tr '\0' '\n' 2>/dev/null <"$environ") || continue
    grep -qxF "FLEET_RUN_ID=$run_id" <<<"$vars" || continue
    grep -qxF "CUDA_VISIBLE_DEVICES=$1" <<<"$vars" || continue
    if grep -qxF "FLEET_GPU_LEFTOVER=1" <<<"$vars"; then
      [[ $2 == yes ]] && printf '%s\n' "$pid"
      continue
    fi
    [[ $2 == no ]] || continue
    read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
    rest=${stat##*) }
    read -ra f <<<"$rest"
    [[ ${f[3]} == "$pid" ]] && printf '%s\n' "$pid"  # f[3] is field 6, the session: a leader
  done
  return 0
}

# h, after every GPU is READY: kill -9 the server of the scenario's GPU (its leftover child
# survives, holding memory), start a bystander that holds 2 GiB of the same GPU for
# $bystander_s seconds (a session of its own, not fleet's), `fleetctl restart --now`, and check
# that the relaunch killed the leftover and only it, waited for the bystander's memory, and got
# READY.
bystander_s=40
leftover_relaunch() {  # SCENARIO_DIR
  local sdir=$1 g=${scenario_gpus[0]} server leftover bystander=0 byst_pid=0 byst_rc=0 state=
  local name="local/gpu/gpu$g" tries t_restart t_ready relaunch_rc=0 agent_log=$1/state/agent.log
  local -a lines=()
  server=$(run_pids_on_gpu "$g" no | head -1)
  leftover=$(run_pids_on_gpu "$g" yes | head -1)
  if [[ -z $server || -z $leftover ]]; then
    printf '  leftover: not set up (server pid "%s", leftover pid "%s"): see %s/logs\n' \
      "$server" "$leftover" "$sdir" >>"$sdir/extra.txt"
    return 0
  fi
  lines+=("server pid $server, its leftover child pid $leftover (own group, same session); gpu $g: $(smi_used "$g") MiB used")
  kill -KILL "$server"
  for ((tries = 0; tries < 240; tries++)); do
    state=$(server_state "$name")
    [[ -n $state && $state != READY ]] && break
    sleep 0.5  # a poll interval, not a synchronisation guess
  done
  lines+=("after kill -9 of the server: fleetd says $state; leftover alive: $(kill -0 "$leftover" 2>/dev/null && echo yes || echo no); gpu $g: $(smi_used "$g") MiB used")
  # The bystander: not fleet's (no FLEET_RUN_ID, a session of its own), 2 GiB for a while.
  rm -f -- "$sdir/bystander.pid"
  env -u FLEET_RUN_ID CUDA_VISIBLE_DEVICES="$g" CUDA_DEVICE_ORDER=PCI_BUS_ID \
    setsid -w "$python" -c '
import os, sys, time, torch
torch.cuda.set_device(0)
hold = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()}\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(float(sys.argv[2]))' "$sdir/bystander.pid" "$bystander_s" >"$sdir/bystander.log" 2>&1 &
  bystander=$!
  for ((tries = 0; tries < 240; tries++)); do
    [[ -s $sdir/bystander.pid ]] && break
    kill -0 "$bystander" 2>/dev/null || break
    sleep 0.5  # a poll interval: the bystander's CUDA start has no event to wait on
  done
  byst_pid=$(cat "$sdir/bystander.pid" 2>/dev/null || echo 0)
  lines+=("bystander pid $byst_pid holds 2 GiB for ${bystander_s} s; gpu $g: $(smi_used "$g") MiB used")
  t_restart=$(date +%s)
  fleetctl restart "$name" --now >"$sdir/restart.txt" 2>&1 ||
    lines+=("restart failed: $(head -c 300 "$sdir/restart.txt")")
  # `status --until-ready` ends at once here: right after `restart --now` the server is STOPPED
  # for a moment, and all STOPPED counts as an end for it. Its state is followed instead.
  relaunch_rc=124
  for ((tries = 0; tries < timeout_s * 2; tries++)); do
    state=$(server_state "$name")
    printf '%s %s\n' "$(date +%s)" "$state" >>"$sdir/watch-relaunch.txt"
    [[ $state == READY ]] && { relaunch_rc=0; break; }
    [[ $state == GAVE_UP ]] && { relaunch_rc=2; break; }
    sleep 0.5  # a poll interval, not a synchronisation guess
  done
  t_ready=$(date +%s)
  wait "$bystander" 2>/dev/null || byst_rc=$?
  lines+=("relaunch: READY wait ended $relaunch_rc (0 READY, 2 GAVE_UP, 124 timed out) after $((t_ready - t_restart)) s (the bystander held its memory for ${bystander_s} s)")
  lines+=("leftover pid $leftover after the relaunch: $(kill -0 "$leftover" 2>/dev/null && echo 'STILL ALIVE (wrong)' || echo 'gone (right)')")
  lines+=("bystander exit status $byst_rc: $([[ $byst_rc == 0 ]] && echo 'ran to its end, never signalled (right)' || echo 'ended abnormally (wrong if it was signalled)')")
  if grep -q "killed the previous server's leftovers: pid $leftover " "$agent_log"; then
    lines+=("agent: killed the previous server's leftover pid $leftover (right)")
  else
    lines+=("agent: no line saying it killed pid $leftover (wrong)")
  fi
  if [[ $byst_pid != 0 ]] && grep -q "pid $byst_pid " "$agent_log"; then
    lines+=("agent: reported the bystander: $(grep -m1 -o "gpu $g: [0-9]* MiB used.*pid $byst_pid [^;]*" "$agent_log" | head -c 400)")
  else
    lines+=("agent: did not name the bystander pid $byst_pid (wrong unless its memory was gone first)")
  fi
  grep 'gpu check: ' "$agent_log" >"$sdir/gpu-checks.txt" 2>/dev/null || true
  printf '  %s\n' "${lines[@]}" >>"$sdir/extra.txt"
  return 0
}

# i: the first GPU of --gpus whose index, in CUDA's default order (fastest first), is another
# physical GPU than nvidia-smi's GPU of that index; empty when the orders agree. What it saw goes
# to FILE.
pci_order_gpu() {  # FILE
  CUDA_DEVICE_ORDER=FASTEST_FIRST "$python" - "$nvidia_smi" "$1" "${gpus[@]}" <<'EOF'
import os, subprocess, sys
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
import torch
smi, out, wanted = sys.argv[1], sys.argv[2], [int(g) for g in sys.argv[3:]]
rows = subprocess.run([smi, "--query-gpu=index,uuid,name,pci.bus_id", "--format=csv,noheader"],
                      stdout=subprocess.PIPE, text=True, check=True).stdout.splitlines()
pci = {int(r.split(", ")[0]): r.split(", ")[1:] for r in rows if r.strip()}
found, report = "", []
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    uuid = f"GPU-{p.uuid}" if getattr(p, "uuid", None) is not None else None
    same = (uuid == pci[i][0]) if uuid else (p.name == pci[i][1])
    report.append(f"index {i}: CUDA's default order: {p.name} {uuid or '(torch gives no uuid)'}; "
                  f"nvidia-smi: {pci[i][1]} {pci[i][0]} {pci[i][2]}" + ("" if same else "  <- differs"))
    if not same and not found and i in wanted:
        found = str(i)
with open(out, "w") as f:
    f.write("\n".join(report) + "\n")
print(found)
EOF
}

# i, after READY: the server of the scenario's GPU ran on nvidia-smi's GPU of that index.
pci_order_check() {  # SCENARIO_DIR
  local sdir=$1 g=${scenario_gpus[0]} want got
  want=$("$nvidia_smi" --query-gpu=uuid --format=csv,noheader -i "$g" | tr -d ' ')
  got=$(grep -m1 -o 'uuid GPU-[0-9a-f-]*' "$sdir/logs/server_gpu$g.log" | sed 's/^uuid //') || got=
  {
    sed 's/^/  /' "$sdir/orders.txt"
    printf '  config gpu %s: the server ran on %s; nvidia-smi gpu %s is %s: %s\n' "$g" \
      "${got:-(no uuid in its log)}" "$g" "$want" \
      "$([[ -n $got && $got == "$want" ]] && echo 'the same GPU (right)' || echo 'NOT the same (wrong, or no uuid in the log)')"
  } >>"$sdir/extra.txt"
}

run_scenario() {  # NAME
  local name=$1 sdir=$out/$1 base_port t0 t1 watch_rc=0 server number
  step "Scenario ${letter_of[$name]} $name: ${what_of[$name]}"
  rm -rf -- "$sdir" "$out/jit/$name" "$out/toolkits/$name"
  mkdir -p "$sdir/logs" "$out/jit/$name"
  sock=$sock_dir/${letter_of[$name]}
  scenario_gpus=("${gpus[@]}")
  case $name in
    leftover) scenario_gpus=("${gpus[0]}") ;;
    pci_order)
      local differs
      differs=$(pci_order_gpu "$sdir/orders.txt") || differs=
      if [[ -z $differs ]]; then
        note "skipped: on this machine CUDA's default order and PCI order agree for GPUs ${gpus[*]}"
        {
          printf '== %s  (skipped)\n' "$name"
          printf '  CUDA default order and PCI order agree here (GPUs of one kind): nothing to show\n'
          sed 's/^/  /' "$sdir/orders.txt" 2>/dev/null || true
        } >"$sdir/result.txt"
        return 0
      fi
      scenario_gpus=("$differs")
      note "GPU $differs: CUDA's default order puts another GPU at this index (see orders.txt)"
      ;;
  esac
  start_daemons "$sdir/state"
  base_port=$(python_free_base_port) || die "no $((max_gpu + 1)) consecutive free ports"
  scenario_env "$name" "$sdir"
  write_config "$name" "$sdir" "$base_port"
  note "config $sdir/fleet.yaml (ports $base_port + gpu), logs $sdir/logs/"
  fleetctl attempts -o json >"$sdir/attempts.before.json" 2>/dev/null || true
  fleetctl remediations -o json >"$sdir/remediations.before.json" 2>/dev/null || true

  t0=$(date +%s.%N)
  if ! fleetctl deploy -f "$sdir/fleet.yaml" >"$sdir/deploy.txt" 2>&1; then
    note "deploy failed:"; sed 's/^/      /' "$sdir/deploy.txt"
  fi
  # The watch: a line per change (not a terminal), until all READY (0), one GAVE_UP or all
  # STOPPED (2), or the scenario's timeout (124).
  timeout "$timeout_s" "$bin_dir/fleetctl" --socket "$sock/fleetd.sock" --timeout 30s \
    status --watch --until-ready >"$sdir/watch.txt" 2>&1 </dev/null || watch_rc=$?
  # One GAVE_UP ends --until-ready while the other GPUs may still be starting: wait (within the
  # same timeout) until every server is settled (READY, GAVE_UP or STOPPED), following the
  # changes in watch-more.txt.
  if [[ $watch_rc == 2 ]] && ! all_settled; then
    note "one server gave up; waiting for the others to settle"
    "$bin_dir/fleetctl" --socket "$sock/fleetd.sock" --timeout 30s status --watch \
      >"$sdir/watch-more.txt" 2>&1 </dev/null &
    watcher=$!
    while ! all_settled; do
      (($(date +%s) - ${t0%.*} < timeout_s)) || { watch_rc=124; break; }
      sleep 1  # a poll interval, not a synchronisation guess
    done
    kill -TERM "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    watcher=
  fi
  t1=$(date +%s.%N)
  note "status --until-ready exited $watch_rc after $((${t1%.*} - ${t0%.*})) s"
  : >"$sdir/extra.txt"
  case $name in
    leftover)
      if [[ $watch_rc == 0 ]]; then
        leftover_relaunch "$sdir"
      else
        printf '  leftover: not every server got READY first (watch exit %s): nothing killed\n' \
          "$watch_rc" >>"$sdir/extra.txt"
      fi
      ;;
    pci_order) pci_order_check "$sdir" ;;
  esac

  fleetctl status -o json >"$sdir/status.json" 2>"$sdir/status.err" || true
  fleetctl status -o wide >"$sdir/status.txt" 2>&1 || true
  fleetctl attempts -o json >"$sdir/attempts.json" 2>"$sdir/attempts.err" || true
  fleetctl attempts >"$sdir/attempts.txt" 2>&1 || true
  if ! fleetctl remediations -o json >"$sdir/remediations.json" 2>"$sdir/remediations.err"; then
    rm -f -- "$sdir/remediations.json"  # the verb may not exist yet: recorded in .err
  fi
  fleetctl remediations -o wide >"$sdir/remediations.txt" 2>&1 || true

  analyse "$sdir" "$name" "$t0" "$t1" "$watch_rc" >/dev/null || note "analysis failed"
  cat -- "$sdir/extra.txt" >>"$sdir/result.txt" 2>/dev/null || true
  : >"$sdir/explain.jsonl"
  : >"$sdir/explain.txt"
  if [[ -f $sdir/failed.tsv ]]; then
    while IFS=$'\t' read -r server number; do
      [[ -n $server ]] || continue
      fleetctl explain --server "$server" --attempt "$number" -o json >>"$sdir/explain.jsonl" \
        2>>"$sdir/explain.err" || true
      fleetctl explain --server "$server" --attempt "$number" --color never >>"$sdir/explain.txt" \
        2>&1 || true
    done <"$sdir/failed.tsv"
  fi
  # The record and the remediations also at the top of --out, one file each per scenario: easy
  # to keep (and to copy off a machine that returns only a shallow folder).
  cp -- "$sdir/remediations.txt" "$out/$name.remediations.txt" 2>/dev/null || true
  cp -- "$sdir/explain.txt" "$out/$name.explain.txt" 2>/dev/null || true
  [[ -f $sdir/result.txt ]] && sed 's/^/    /' "$sdir/result.txt"

  fleetctl stop --all >"$sdir/stop.txt" 2>&1 || note "stop --all failed (see $sdir/stop.txt)"
  wait_all_stopped 300 || note "servers still running after stop --all (see fleetctl status)"
  stop_daemons
  # After fleetd stopped: its write-ahead log is in the file by then (a copy made while it runs
  # can miss the newest rows).
  cp -- "$sdir/state/fleet.db" "$out/$name.fleet.db" 2>/dev/null || true
  return 0
}

for name in "${selected[@]}"; do
  run_scenario "$name"
done

# --- Summary -----------------------------------------------------------------------------------

{
  printf 'gpu-fleet real-GPU run: %s\n' "$(head -1 "$out/env.txt")"
  printf 'GPUs: %s; %s\n\n' "${gpus[*]}" "$torch_info"
  for name in "${all_scenarios[@]}"; do
    if [[ -f $out/$name/result.txt ]]; then
      cat "$out/$name/result.txt"
      printf '  (folder %s)\n\n' "$out/$name"
    fi
  done
} >"$out/summary.txt"
step "Summary ($out/summary.txt)"
cat "$out/summary.txt"

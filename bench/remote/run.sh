#!/usr/bin/env bash
# The remote-path benchmark (issue 6, "time to bootstrap an agent into a fresh container and to
# reach READY for 8 simulated servers on two hosts, against the same through the local
# transport"; results in BENCHMARKS.md, "Remote path: bootstrap over SSH and time-to-ready on two
# hosts"). Three measurements of the same 8 simulated SGLang servers (2 containers x 4 GPUs, each
# container its own fresh world made with tests/sim/make_sim_world.sh --state fixed, so every
# start is a cold one: canary, JIT build, then the other three), remediation off, each run RUNS
# times at one simulated speed, interleaved, medians reported:
#
#   remote-fresh  two fresh simulated Proxmox hosts (tests/sim/sim_proxmox_host.sh: real sshd,
#                 `pct` = tests/sim/pct-sim), pve1 with container 201 over a `direct` channel
#                 (routed), pve2 with container 202 over `ssh_tunnel` (not routed), no agent in
#                 either; time from fleetd's start (with --config and --agent-binary) to
#                 `fleetctl status --until-ready` returning 0. From fleetd's log: each container's
#                 agent bootstrap (its "installed and started" line: total and steps), and when it
#                 was logged (seconds after fleetd's start).
#   remote-warm   the same hosts, agents installed and running: `fleetctl stop --all` (until all
#                 STOPPED), fleetd stopped, both worlds made afresh at the same paths (a cold JIT
#                 cache again, as in the other two), then a new fleetd on a new state dir with the
#                 same config; time to all READY. The bootstrap is then the version check and the
#                 health call only: fleetd must log no "started" line.
#   local         the same two worlds' servers through the local transport: two loopback
#                 containers (201, 202) of host `local`, each with its own fleet-agent on a unix
#                 socket started beforehand (as deploy/demo.sh does), servers on two different
#                 blocks of free loopback ports; time from fleetd's start to all READY.
#
# The containers of the two simulated hosts are, by default, network namespace + chroot
# (`pct` = tests/sim/pct-sim). With --lxc they are real LXC containers (issue 17; `pct` =
# tests/sim/pct-lxc: `pct exec` is lxc-attach, `pct push` writes into the running container):
# privileged, LXC's init.lxc as PID 1 (no systemd: the agents start detached), each on an overlay
# of the Debian 12 root of tests/sim/lxc_rootfs.sh in $FLEET_LXC_CACHE (default BUILD_DIR/lxc-cache;
# made there with debootstrap if missing), the same folders bound in at the same paths as in the
# chroot mode (the worlds, the build dir, the repository). The local mode is the same in both.
# Every output names the mode: containers=chroot|lxc.
#
# Overhead of the remote path = remote-fresh - local and remote-warm - local (s and % of local).
# The same stripped fleet-agent and fleet-http-probe (what a release ships; `strip -o`) serve
# all three: fleetd pushes them in remote-fresh, the local agents run them.
#
#   bash bench/remote/run.sh [--speed X] [--runs N] [--out DIR] [--build-dir DIR] [--no-build]
#                            [--lxc]
#
#   --speed X        FLEET_SIM_SPEED of every simulated server (default 10: a cold start is a few s)
#   --runs N         runs of each measurement (default 3)
#   --out DIR        results and every run's state (default /tmp/gpu-fleet-bench-remote; emptied
#                    at start, and only if it is empty or a previous run's)
#   --build-dir DIR  the CMake build to reuse or make (default build/, or $BUILD_DIR)
#   --no-build       use the binaries in the build dir as they are (no deps, no cmake)
#   --lxc            the simulated hosts' containers are real LXC containers (see above; needs
#                    lxc-start, lxc-attach, lxc-info, and debootstrap if the root is not made yet)
#
# Needs root (network and mount namespaces, chroot, sshd), as tests/sim/sim_proxmox_host.sh does.
# Each remote measurement keeps, in its run's dir, the containers' agent log and pid file
# (MODE-pveN-CTID-agent.log, .pid: read from the chroot, or from the LXC overlay's upper layer).
# It prints one line per measurement, the bootstrap steps, and a summary. Machine-readable:
# DIR/summary.env (key=value), DIR/summary.json (one JSON object), DIR/runs.tsv (one line per
# measurement), DIR/bootstrap.tsv (one line per container bootstrap). Exits non-zero when a
# measurement does not end with all 8 READY in 8 launches, or when the bootstrap fleetd logs is
# not the one expected (a fresh install in remote-fresh, none in remote-warm). Every process it
# starts is stopped, and every simulated host taken down, on any exit; waits are on log lines and
# fleetd's own `status --until-ready`, with bounded polls only where nothing can be waited on.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
source deploy/lib/fleet.sh
fleet_me=bench

speed=10
runs=3
out=/tmp/gpu-fleet-bench-remote
build=${BUILD_DIR:-build}
do_build=true
containers=chroot
while [[ $# -gt 0 ]]; do
  case $1 in
    --speed) [[ $# -ge 2 ]] || usage; speed=$2; shift ;;
    --speed=*) speed=${1#--speed=} ;;
    --runs) [[ $# -ge 2 ]] || usage; runs=$2; shift ;;
    --runs=*) runs=${1#--runs=} ;;
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build=$2; shift ;;
    --build-dir=*) build=${1#--build-dir=} ;;
    --no-build) do_build=false ;;
    --lxc) containers=lxc ;;
    -h | --help) usage ;;
    *) printf 'bench: unknown argument %s\n' "$1" >&2; usage ;;
  esac
  shift
done
[[ $speed =~ ^[0-9]+([.][0-9]+)?$ && ! $speed =~ ^0+([.]0+)?$ ]] || {
  printf 'bench: --speed must be a positive number, not %s\n' "$speed" >&2
  exit 2
}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { printf 'bench: --runs must be >= 1, not %s\n' "$runs" >&2; exit 2; }

readonly gpus_per_ct=4
readonly servers=8
readonly ctids=(201 202)
readonly agent_port=50151
readonly remote_base_port=30000
# Bounds of the waits, in wall seconds: a cold start is about 50 simulated seconds, the bootstrap
# a few real ones.
bound=$(awk -v s="$speed" 'BEGIN {b = int(600 / s) + 90; print (b > 900 ? 900 : b)}')

[[ $(id -u) == 0 ]] || die "needs root: network and mount namespaces, chroot, sshd (tests/sim/sim_proxmox_host.sh)"
for tool in /usr/sbin/sshd /usr/bin/ssh-keygen /usr/bin/openssl; do
  [[ -x $tool ]] || die "no $tool (deploy/install-deps.sh installs it)"
done
for tool in ip unshare chroot nsenter strip flock; do
  command -v "$tool" >/dev/null || die "no $tool on PATH (iproute2, util-linux, coreutils, binutils)"
done
[[ -d /run/netns ]] || mkdir -p /run/netns
if [[ $containers == lxc ]]; then
  for tool in lxc-start lxc-attach lxc-info lxc-wait lxc-stop; do
    command -v "$tool" >/dev/null || die "no $tool on PATH (--lxc; deploy/install-deps.sh installs lxc)"
  done
fi

if $do_build; then
  step "dependencies"
  bash deploy/install-deps.sh
  step "build ($build/)"
  bench_build "$build" RelWithDebInfo fleetd fleet-agent fleet-http-probe fleetctl \
    sglang-server-sim sim-free-ports
fi
bin=$(cd -- "$build" && pwd)
for b in daemon/fleetd agent/fleet-agent agent/fleet-http-probe cli/fleetctl \
  tests/sim/sglang-server-sim tests/sim/sim-free-ports; do
  [[ -x $bin/$b ]] || die "$bin/$b is not built (run without --no-build)"
done
# --lxc: the containers' Debian 12 root, made now if missing (debootstrap: minutes, not measured).
lxc_cache=
lxc_root=
lxc_version=
if [[ $containers == lxc ]]; then
  lxc_version=$(lxc-start --version 2>/dev/null) || lxc_version=unknown
  lxc_cache=${FLEET_LXC_CACHE:-$bin/lxc-cache}
  lxc_root=$(bash tests/sim/lxc_rootfs.sh "$lxc_cache") || die "no LXC root in $lxc_cache (tests/sim/lxc_rootfs.sh)"
fi

# The results dir: emptied, but never one that holds something else than a previous run.
readonly marker=.gpu-fleet-bench-remote
out=$(claim_dir "$out" "$marker" "the results dir" "a previous run's results dir" --out)
# A previous run that was killed hard may have left hosts up: take them down before deleting.
for state in "$out"/run-*/pve*/state; do
  if [[ -f $state ]]; then bash tests/sim/sim_proxmox_host.sh down "${state%/state}"; fi
done
find "$out" -mindepth 1 -delete
touch "$out/$marker"

# The programs, copied once: a build running beside the benchmark cannot swap one mid-run. share/
# is what the containers see at the same path (--bind): the worlds and the simulated server.
share=$out/share
mkdir -p "$out/bin" "$out/agent-bin" "$share/bin"
cp "$bin/daemon/fleetd" "$bin/cli/fleetctl" "$bin/tests/sim/sim-free-ports" "$out/bin/"
cp "$bin/tests/sim/sglang-server-sim" "$share/bin/"
# fleet-agent and fleet-http-probe as a release ships them: every byte crosses the SSH connection.
strip -o "$out/agent-bin/fleet-agent" "$bin/agent/fleet-agent"
strip -o "$out/agent-bin/fleet-http-probe" "$bin/agent/fleet-http-probe"
fleetd_bin=$out/bin/fleetd
fleetctl_bin=$out/bin/fleetctl
free_ports=$out/bin/sim-free-ports
server_bin=$share/bin/sglang-server-sim
agent_bin=$out/agent-bin/fleet-agent
agent_version=$("$agent_bin" --version)
agent_kib=$(($(stat -c %s "$agent_bin") / 1024))
probe_kib=$(($(stat -c %s "$out/agent-bin/fleet-http-probe") / 1024))

step "machine"
model=$(cpu_model)
revision=$(git_revision)
date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
sshd_version=$( (/usr/sbin/sshd -V 2>&1 || true) | head -1)
echo "cpu: ${model:-unknown} ($(nproc) cores online)   kernel: $(uname -r)"
echo "load average: $load_start   revision: $revision   date: $date_utc"
echo "agent: $agent_version, stripped: fleet-agent $agent_kib KiB + fleet-http-probe $probe_kib KiB"
echo "sshd: $sshd_version"
echo "sim speed: $speed (FLEET_SIM_SPEED)   runs: $runs   results: $out"
if [[ $containers == lxc ]]; then
  echo "containers=lxc: real LXC containers (LXC $lxc_version), privileged, init.lxc, root $lxc_root"
else
  echo "containers=chroot: network namespace + chroot (tests/sim/pct-sim)"
fi

# --- Process bookkeeping: everything started here is stopped on any exit ---------------------------

pids=()        # fleetds and local agents: stopped with TERM, then KILL
hosts=()       # simulated hosts (their dirs): `down` kills everything in their namespaces
worlds=()      # worlds: any process still running a program from one is killed at exit
fleet_dirs=()  # state dirs of fleetds still running: their servers are stopped through them first
declare -A fleetd_pids=()  # state dir -> its fleetd's pid

# world_pids, forget_pid, stop_pid, stop_fleet, run_bg, kill_worlds: deploy/lib/fleet.sh. The
# lib's stop_all, with the simulated hosts taken down before the worlds are swept.
# shellcheck disable=SC2317  # called through the EXIT trap and between measurements
stop_all() {
  local d pid h
  for d in ${fleet_dirs[@]+"${fleet_dirs[@]}"}; do stop_fleet "$d" || true; done
  fleet_dirs=()
  for pid in ${pids[@]+"${pids[@]}"}; do stop_pid "$pid"; done
  pids=()
  for h in ${hosts[@]+"${hosts[@]}"}; do bash tests/sim/sim_proxmox_host.sh down "$h" || true; done
  hosts=()
  kill_worlds
}
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

# --- Helpers ----------------------------------------------------------------------------------------

# now, secs, median, minimum, maximum, yaml_string: deploy/lib/fleet.sh.
# seconds DURATION: an absl::FormatDuration text ("3.412s", "66ms", "1m2.5s", "0") in seconds.
seconds() {
  awk -v d="$1" 'BEGIN {
    t = 0
    while (match(d, /^[0-9.]+(h|ms|us|ns|m|s)/)) {
      tok = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
      u = tok; sub(/^[0-9.]+/, "", u)
      t += (tok + 0) * (u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 0.001 : u == "us" ? 1e-6 : 1e-9)
    }
    printf "%.3f", t
  }'
}
stamp() {  # each line of stdin prefixed with the wall time it was read at
  local line
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
}

# make_worlds DIR: one fresh world per container, DIR/world-CTID (its JIT cache empty); DIR must
# be under $share (the containers see it at the same path).
make_worlds() {
  local ct
  for ct in "${ctids[@]}"; do
    rm -rf -- "$1/world-$ct"
    mkdir -p "$1"
    bash tests/sim/make_sim_world.sh "$1/world-$ct" --state fixed --server "$server_bin" \
      --gpus "$gpus_per_ct" >/dev/null
    worlds+=("$1/world-$ct")
  done
}

# Four consecutive free loopback ports from $1 (base_port + gpu), as the demo finds them.
ports_free_from() {
  local p
  for ((p = $1; p < $1 + gpus_per_ct; p++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && return 1
  done
  return 0
}
# find_base_port [NOT]: a base with gpus_per_ct free ports, its block not overlapping NOT's.
find_base_port() {
  local candidate
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    candidate=$("$free_ports" 1)
    if ((candidate + gpus_per_ct < 65536)) && ports_free_from "$candidate" &&
      { [[ -z ${1-} ]] || ((candidate + gpus_per_ct <= $1 || candidate >= $1 + gpus_per_ct)); }; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

# The config's parts shared by both transports: per container a template on its own world (the
# world's python, server.env and FLEET_SIM_SPEED, as tests/sim/sim_fleet_config.sh writes them),
# the world's tools, and the default policy with remediation off.

# container_tail WORLD CTID BASE_PORT: a container's gpus, template, base_port and tools.
container_tail() {
  printf '        gpus: [0, 1, 2, 3]\n        template: sim-%s\n' "$2"
  printf '        base_port: %d\n' "$3"
  bash tests/sim/sim_fleet_config.sh --world "$1" --tools-only
}

# templates_and_policy WORLDS_DIR LOG_PATH_OF_CT...: the templates sim-CTID and the policy.
# LOG_PATH is given per container (in order of ctids), with {gpu} in it.
templates_and_policy() {
  local worlds_dir=$1 ct i=0
  shift
  local -a log_paths=("$@")
  printf 'templates:\n'
  for ct in "${ctids[@]}"; do
    bash tests/sim/sim_fleet_config.sh --world "$worlds_dir/world-$ct" --template-only "sim-$ct" \
      --log-path "${log_paths[$i]}" --speed "$speed"
    i=$((i + 1))
  done
  printf 'policies:\n  - name: default\n    max_attempts: 3\n    backoff_initial: 1s\n    remediation: off\n'
}

# --- The remote setup: two simulated hosts, key, known_hosts, certificates, config ---------------

declare -A host_addr=() ct_addr=()
readonly -A host_of_ct=([201]=pve1 [202]=pve2)
# ct_root HOST_DIR CTID: the container's files as this machine sees them: the chroot, or with
# --lxc the upper layer of the container's overlay (what the container wrote; read only: writing
# there under the mounted overlay is not defined; `down` deletes it).
ct_root() {
  if [[ $containers == lxc ]]; then
    printf '%s\n' "$1/lxc/$2/upper"
  else
    printf '%s\n' "$1/ct/$2/rootfs"
  fi
}
# The agent's log and pid file in a container (daemon/remote/agent_bootstrap.h).
readonly remote_agent_log=/var/log/gpu-fleet-agent.log remote_agent_pid=/run/gpu-fleet-agent.pid

# keep_agent_files DIR MODE: each container's agent log and pid file copied to
# DIR/MODE-pveN-CTID-agent.{log,pid} (LXC's upper layer goes with `down`); the pid on stdout, one
# "CTID PID" line per container.
keep_agent_files() {
  local dir=$1 mode=$2 ct root name pid
  for ct in "${ctids[@]}"; do
    root=$(ct_root "$dir/${host_of_ct[$ct]}" "$ct")
    name=$dir/$mode-${host_of_ct[$ct]}-$ct-agent
    cp -- "$root$remote_agent_log" "$name.log" 2>/dev/null || : >"$name.log"
    pid=-
    if [[ -f $root$remote_agent_pid ]]; then
      cp -- "$root$remote_agent_pid" "$name.pid"
      read -r pid <"$name.pid" || pid=-
    fi
    printf '%s %s\n' "$ct" "${pid:--}"
  done
}

# show_agent_logs MODE DIR: the end of each container's agent log, on stderr (after a failure).
show_agent_logs() {
  local mode=$1 dir=$2 ct f
  for ct in "${ctids[@]}"; do
    if [[ $mode == local ]]; then
      f=$dir/local/agent-$ct.log
    else
      f=$(ct_root "$dir/${host_of_ct[$ct]}" "$ct")$remote_agent_log
    fi
    printf '%s: the end of %s (containers=%s):\n' "$fleet_me" "$f" "$containers" >&2
    tail -n 20 -- "$f" >&2 2>/dev/null || printf '  (none)\n' >&2
  done
}

# hosts_up DIR: pve1 (container 201, routed: `direct`) and pve2 (container 202, not routed:
# `ssh_tunnel`) under DIR, our key authorized on both, DIR/known_hosts, DIR/pki.
hosts_up() {
  local dir=$1 h ct key_type key_text
  local -a route=() lxc=()
  [[ $containers == lxc ]] && lxc=(--lxc "$lxc_cache")
  local -A host_ct=([pve1]=201 [pve2]=202)
  : >"$dir/known_hosts"
  for h in pve1 pve2; do
    ct=${host_ct[$h]}
    route=()
    [[ $h == pve1 ]] && route=(--route)
    hosts+=("$dir/$h")
    bash tests/sim/sim_proxmox_host.sh up "$dir/$h" "$ct" ${route[@]+"${route[@]}"} \
      --bind "$share" --bind "$bin" --bind "$repo" ${lxc[@]+"${lxc[@]}"} >"$dir/$h.up" 2>&1 ||
      { cat "$dir/$h.up" >&2; die "sim_proxmox_host.sh up $dir/$h failed"; }
    host_addr[$h]=$(sed -n 's/^host_addr=//p' "$dir/$h.up")
    ct_addr[$ct]=$(sed -n "s/^ct_$ct=//p" "$dir/$h.up")
    cat "$out/id_ed25519.pub" >>"$dir/$h/authorized_keys"
    read -r key_type key_text _ <"$(sed -n 's/^host_key=//p' "$dir/$h.up")"
    printf '%s %s %s\n' "${host_addr[$h]}" "$key_type" "$key_text" >>"$dir/known_hosts"
  done
  "$fleetctl_bin" certs init --dir "$dir/pki" --agents "${ct_addr[201]},${ct_addr[202]}" \
    >"$dir/certs.log" 2>&1 || { cat "$dir/certs.log" >&2; die "fleetctl certs init failed"; }
}

# remote_config DIR WORLDS_DIR: the two hosts' config on standard output.
remote_config() {
  local dir=$1 worlds_dir=$2 h ct kind
  local -A host_ct=([pve1]=201 [pve2]=202) host_kind=([pve1]=direct [pve2]=ssh_tunnel)
  printf '# written by bench/remote/run.sh: two simulated Proxmox hosts, 4 GPUs each\nhosts:\n'
  for h in pve1 pve2; do
    ct=${host_ct[$h]}
    kind=${host_kind[$h]}
    printf '  - name: %s\n' "$h"
    printf '    reach: {kind: ssh, address: %s, identity_file: %s, known_hosts: %s}\n' \
      "${host_addr[$h]}" "$(yaml_string "$out/id_ed25519")" "$(yaml_string "$dir/known_hosts")"
    printf '    containers:\n      - ctid: "%s"\n' "$ct"
    printf '        channel: {kind: %s, address: %s, port: %d, ca_file: %s, cert_file: %s, key_file: %s, agent_cert_file: %s, agent_key_file: %s}\n' \
      "$kind" "${ct_addr[$ct]}" "$agent_port" "$(yaml_string "$dir/pki/ca.crt")" \
      "$(yaml_string "$dir/pki/fleetd.crt")" "$(yaml_string "$dir/pki/fleetd.key")" \
      "$(yaml_string "$dir/pki/agent-${ct_addr[$ct]}.crt")" \
      "$(yaml_string "$dir/pki/agent-${ct_addr[$ct]}.key")"
    container_tail "$worlds_dir/world-$ct" "$ct" "$remote_base_port"
  done
  # Each container logs to its own /var/log.
  templates_and_policy "$worlds_dir" "/var/log/sglang_gpu{gpu}.log" "/var/log/sglang_gpu{gpu}.log"
}

# local_config DIR WORLDS_DIR BASE_201 BASE_202: the local host's config on standard output.
local_config() {
  local dir=$1 worlds_dir=$2 ct
  local -A base=([201]=$3 [202]=$4)
  printf '# written by bench/remote/run.sh: two local containers, 4 GPUs each\nhosts:\n'
  printf '  - name: local\n    containers:\n'
  for ct in "${ctids[@]}"; do
    printf '      - ctid: "%s"\n' "$ct"
    printf '        channel: {kind: loopback, address: %s}\n' "$(yaml_string "unix:$dir/agent-$ct.sock")"
    container_tail "$worlds_dir/world-$ct" "$ct" "${base[$ct]}"
  done
  templates_and_policy "$worlds_dir" "$dir/logs/201/sglang_gpu{gpu}.log" "$dir/logs/202/sglang_gpu{gpu}.log"
}

# --- One measurement: fleetd from its start to all READY --------------------------------------------

# time_to_ready MODE RUN DIR STATE CONFIG: starts fleetd (STATE, CONFIG, our agent package), waits
# for all READY; sets ttr, and appends the measurement to runs.tsv and its bootstraps to
# bootstrap.tsv. fleetd keeps running (its dir in fleet_dirs).
time_to_ready() {
  local mode=$1 r=$2 dir=$3 state=$4 config=$5 t0 t1 rc=0 fleetd_pid load log attempts
  local ready_n ttr_med ttr_max line host ct rest total steps at part name boots=0
  local -A boot_total=() boot_at=() st=()
  mkdir -p "$state"
  log=$state/fleetd.log
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(now)
  "$fleetd_bin" --state-dir "$state" --config "$config" --agent-binary "$agent_bin" \
    2> >(stamp >>"$log") &
  fleetd_pid=$!
  pids+=("$fleetd_pid")
  fleet_dirs+=("$state")
  fleetd_pids[$state]=$fleetd_pid
  # fleetd serves once it has loaded the config (its deploy already under way).
  if ! run_bg timeout 30 grep -q -m1 -F 'serving on' < <(exec tail -n +1 -F --pid="$fleetd_pid" "$log" 2>/dev/null); then
    cat "$log" >&2
    die "$mode run $r: fleetd did not start"
  fi
  run_bg timeout "$bound" "$fleetctl_bin" --state-dir "$state" status --until-ready -o wide \
    >"$state/status.out" 2>&1 || rc=$?
  t1=$(now)
  ttr=$(secs "$t0" "$t1")
  if ((rc != 0)); then
    cat "$state/status.out" >&2
    tail -30 "$log" >&2
    show_agent_logs "$mode" "$dir"
    die "$mode run $r: not all $servers READY (fleetctl status --until-ready exited $rc); state in $state"
  fi
  "$fleetctl_bin" --state-dir "$state" attempts -o json >"$state/attempts.json"
  attempts=$(grep -o '"number":' "$state/attempts.json" | wc -l)
  ready_n=$(grep -o '"outcome":"ready"' "$state/attempts.json" | wc -l)
  ((attempts == servers && ready_n == servers)) ||
    die "$mode run $r: $attempts launches, $ready_n READY: not one clean start per server ($state/attempts.json)"
  # The servers' own time-to-ready (fleetd's record: from each attempt's start to READY).
  grep -o '"time_to_ready_ms":[0-9]*' "$state/attempts.json" | cut -d: -f2 |
    awk '{printf "%.3f\n", $1 / 1000}' >"$state/server_ttr.txt"
  ttr_med=$(median <"$state/server_ttr.txt")
  ttr_max=$(maximum <"$state/server_ttr.txt")
  # When things happened, in seconds after fleetd's start: each container's first launch (its
  # canary's attempt recorded) and the last READY (an attempt's start + its time-to-ready).
  grep -oE '"server":"[^"]*"|"started_at":"[^"]*"|"time_to_ready_ms":[0-9]*' "$state/attempts.json" |
    cut -d: -f2- | tr -d '"' | paste - - - >"$state/attempts.tsv"
  local launch201 launch202 last_ready
  read -r launch201 launch202 last_ready < <(
    paste "$state/attempts.tsv" <(cut -f2 "$state/attempts.tsv" | date -f - '+%s.%N') |
      awk -F'\t' -v t0="$t0" '{
          split($1, name, "/"); ct = name[2]; start = $4 - t0; ready = start + $3 / 1000
          if (!(ct in first) || start < first[ct]) first[ct] = start
          if (ready > last) last = ready
        } END {printf "%.3f %.3f %.3f\n", first["201"], first["202"], last}')

  # The bootstraps fleetd logged: "<time> <fleetd's time> info links: container=N host H,
  # container C: fleet-agent V installed and started (none before) in T: status T, version T, ...".
  while IFS= read -r line; do
    at=$(secs "$t0" "${line%% *}")
    host=$(sed -n 's/.* links: container=[^ ]* host \([^,]*\), container .*/\1/p' <<<"$line")
    ct=$(sed -n 's/.*, container \([^:]*\): .*/\1/p' <<<"$line")
    rest=${line##*started (}
    total=$(seconds "$(sed -n 's/^[^)]*) in \([^:]*\): .*/\1/p' <<<"$rest")")
    steps=${rest#*: }
    st=()
    while IFS= read -r part; do
      name=${part%% *}
      st[$name]=$(seconds "${part#* }")
    done < <(printf '%s\n' "${steps//, /$'\n'}")
    printf '%s\n' "$mode $r $host $ct $total ${st[status]:--} ${st[version]:--} ${st[init]:--} ${st[stage]:--} ${st[push]:--} ${st[start]:--} ${st[health]:--} $at $containers" |
      tr ' ' '\t' >>"$out/bootstrap.tsv"
    boot_total[$ct]=$total
    boot_at[$ct]=$at
    boots=$((boots + 1))
    printf '   bootstrap %s/%s: %s s (logged %s s after fleetd started): %s\n' "$host" "$ct" "$total" "$at" "$steps"
  done < <(grep -E ' links: container=[^ ]+ host [^,]+, container [^:]+: .* started \(' "$log" || true)
  case $mode in
    remote-fresh)
      ((boots == 2)) || die "$mode run $r: fleetd logged $boots agent bootstraps, not 2 ($log)"
      grep -c -F 'installed and started (none before)' "$log" | grep -qx 2 ||
        die "$mode run $r: an agent was there before ($log)"
      ;;
    *) ((boots == 0)) || die "$mode run $r: fleetd (re)started $boots agents; expected none ($log)" ;;
  esac
  printf '%s: all %d READY %s s after fleetd started (containers=%s; servers'"'"' own time-to-ready: median %s s, max %s s; load %s)\n' \
    "$mode" "$servers" "$ttr" "$containers" "$ttr_med" "$ttr_max" "$load"
  printf '   first launch: 201 at %s s, 202 at %s s; last READY at %s s (after fleetd started)\n' \
    "$launch201" "$launch202" "$last_ready"
  printf '%s\n' "$mode $r $ttr $attempts $ttr_med $ttr_max ${boot_total[201]:--} ${boot_total[202]:--} ${boot_at[201]:--} ${boot_at[202]:--} $launch201 $launch202 $last_ready $load $containers" |
    tr ' ' '\t' >>"$out/runs.tsv"
}

# stop_fleetd STATE: the servers through it (until all STOPPED), then fleetd itself.
stop_fleetd() {
  local state=$1 d
  stop_fleet "$state" || die "the servers of $state did not all stop"
  local -a kept=()
  for d in ${fleet_dirs[@]+"${fleet_dirs[@]}"}; do [[ $d == "$state" ]] || kept+=("$d"); done
  fleet_dirs=(${kept[@]+"${kept[@]}"})
  stop_pid "${fleetd_pids[$state]}"
}

# --- The runs, interleaved ---------------------------------------------------------------------------

ssh-keygen -q -t ed25519 -N '' -C gpu-fleet-bench-remote -f "$out/id_ed25519"
printf 'mode\trun\tttr_s\tlaunches\tserver_ttr_median_s\tserver_ttr_max_s\tboot_201_s\tboot_202_s\tboot_201_at_s\tboot_202_at_s\tlaunch_201_at_s\tlaunch_202_at_s\tlast_ready_at_s\tload1\tcontainers\n' >"$out/runs.tsv"
printf 'mode\trun\thost\tctid\ttotal_s\tstatus_s\tversion_s\tinit_s\tstage_s\tpush_s\tstart_s\thealth_s\tlogged_at_s\tcontainers\n' >"$out/bootstrap.tsv"

for ((r = 1; r <= runs; r++)); do
  dir=$out/run-$r
  worlds_dir=$share/run-$r
  mkdir -p "$dir" "$worlds_dir"

  step "run $r of $runs: remote-fresh (two fresh simulated hosts, no agent; fleetd bootstraps both)"
  hosts_up "$dir"
  make_worlds "$worlds_dir/remote"
  remote_config "$dir" "$worlds_dir/remote" >"$dir/remote.yaml"
  time_to_ready remote-fresh "$r" "$dir" "$dir/state-fresh" "$dir/remote.yaml"
  fresh_pids=$(keep_agent_files "$dir" remote-fresh)

  step "run $r of $runs: remote-warm (same hosts, agents running; a new fleetd on a new state dir)"
  stop_fleetd "$dir/state-fresh"
  make_worlds "$worlds_dir/remote"  # the same paths, a cold JIT cache again
  time_to_ready remote-warm "$r" "$dir" "$dir/state-warm" "$dir/remote.yaml"
  # The agents fleetd found are the ones it started in remote-fresh (their pid files unchanged).
  warm_pids=$(keep_agent_files "$dir" remote-warm)
  [[ $warm_pids == "$fresh_pids" && $fresh_pids != *" -"* ]] ||
    die "remote-warm run $r: agents (ctid pid) $(tr '\n' ' ' <<<"$warm_pids")are not remote-fresh's: $(tr '\n' ' ' <<<"$fresh_pids")($dir)"
  note "agents (ctid pid, from the containers' pid files): $(paste -sd' ' - <<<"$fresh_pids"), the same in both"
  stop_all

  step "run $r of $runs: local (the same servers through the local transport, two local agents)"
  make_worlds "$worlds_dir/local"
  base201=$(find_base_port) || die "no $gpus_per_ct consecutive free ports found"
  base202=$(find_base_port "$base201") || die "no $gpus_per_ct consecutive free ports found"
  mkdir -p "$dir/local/logs/201" "$dir/local/logs/202"
  for ct in "${ctids[@]}"; do
    "$agent_bin" --listen "unix:$dir/local/agent-$ct.sock" --state-dir "$dir/local/agent-$ct" \
      --host local --container "$ct" 2>>"$dir/local/agent-$ct.log" &
    agent_pid=$!
    pids+=("$agent_pid")
    # The agent says when it serves (bounded; tail follows the log with inotify).
    run_bg timeout 30 grep -q -m1 -F 'serving agent.proto' < <(exec tail -n +1 -F --pid="$agent_pid" "$dir/local/agent-$ct.log" 2>/dev/null) ||
      { cat "$dir/local/agent-$ct.log" >&2; die "local agent $ct did not start"; }
  done
  local_config "$dir/local" "$worlds_dir/local" "$base201" "$base202" >"$dir/local.yaml"
  time_to_ready local "$r" "$dir" "$dir/local/state" "$dir/local.yaml"
  stop_all
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- Summary ---------------------------------------------------------------------------------------

# col FILE NAME [MODE]: the column NAME of every row (of MODE's rows, when given).
col() {
  awk -F'\t' -v name="$2" -v mode="${3-}" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == name) c = i; next}
    mode == "" || $1 == mode {print $c}' "$1"
}
rmed() { col "$out/runs.tsv" "$2" "$1" | median; }
rlist() { col "$out/runs.tsv" "$2" "$1" | paste -sd' ' -; }
# bmed MODE CTID FIELD: the median of a bootstrap field for one container.
bmed() {
  awk -F'\t' -v mode="$1" -v ct="$2" -v name="$3" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == name) c = i; next}
    $1 == mode && $4 == ct {print $c}' "$out/bootstrap.tsv" | median
}
fresh=$(rmed remote-fresh ttr_s)
warm=$(rmed remote-warm ttr_s)
loc=$(rmed local ttr_s)
over() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a - b}'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", 100 * (a - b) / b}'; }
over_fresh=$(over "$fresh" "$loc")
over_warm=$(over "$warm" "$loc")
pct_fresh=$(pct "$fresh" "$loc")
pct_warm=$(pct "$warm" "$loc")
# Per run, in the same run (the interleaving's pairing).
per_run_over() {
  paste <(col "$out/runs.tsv" ttr_s "$1") <(col "$out/runs.tsv" ttr_s local) |
    awk '{printf "%s%+.2f", (NR > 1 ? " " : ""), $1 - $2}'
}

step "summary (containers=$containers, speed $speed, $runs runs, medians; wall seconds)"
printf '%-48s %8s s   (runs: %s; servers'"'"' own time-to-ready median %s s, max %s s)\n' \
  "remote-fresh: fleetd start -> all $servers READY" "$fresh" "$(rlist remote-fresh ttr_s)" \
  "$(rmed remote-fresh server_ttr_median_s)" "$(rmed remote-fresh server_ttr_max_s)"
printf '%-48s %8s s   (runs: %s; servers'"'"' own time-to-ready median %s s, max %s s)\n' \
  "remote-warm:  fleetd start -> all $servers READY" "$warm" "$(rlist remote-warm ttr_s)" \
  "$(rmed remote-warm server_ttr_median_s)" "$(rmed remote-warm server_ttr_max_s)"
printf '%-48s %8s s   (runs: %s; servers'"'"' own time-to-ready median %s s, max %s s)\n' \
  "local:        fleetd start -> all $servers READY" "$loc" "$(rlist local ttr_s)" \
  "$(rmed local server_ttr_median_s)" "$(rmed local server_ttr_max_s)"
printf '%-48s %+8.3f s (%+d%%; per run: %s)\n' "overhead remote-fresh - local" "$over_fresh" "$pct_fresh" "$(per_run_over remote-fresh)"
printf '%-48s %+8.3f s (%+d%%; per run: %s)\n' "overhead remote-warm - local" "$over_warm" "$pct_warm" "$(per_run_over remote-warm)"
printf '\nwhen, in seconds after fleetd started (medians):\n'
printf '  %-14s %14s %14s %14s %16s\n' mode "201 launched" "202 launched" "last READY" "until-ready ok"
for m in remote-fresh remote-warm local; do
  printf '  %-14s %14s %14s %14s %16s\n' "$m" "$(rmed "$m" launch_201_at_s)" "$(rmed "$m" launch_202_at_s)" \
    "$(rmed "$m" last_ready_at_s)" "$(rmed "$m" ttr_s)"
done
printf '\nagent bootstrap in remote-fresh (medians, s):\n'
printf '  %-22s %7s %7s %7s %7s %7s %7s %7s %7s %9s\n' container total status version init stage push start health "logged at"
for ct in "${ctids[@]}"; do
  label="pve1/201 (direct)"
  [[ $ct == 202 ]] && label="pve2/202 (ssh_tunnel)"
  printf '  %-22s' "$label"
  for f in total_s status_s version_s init_s stage_s push_s start_s health_s logged_at_s; do
    printf ' %7s' "$(bmed remote-fresh "$ct" "$f")"
  done
  printf '\n'
done
echo "agent package: $agent_version, fleet-agent $agent_kib KiB + fleet-http-probe $probe_kib KiB (stripped)"
echo "load average: $load_start at the start, $load_end at the end"
echo "containers=$containers   revision: $revision"

{
  echo "bench=remote"
  echo "containers=$containers"
  echo "lxc_version=$lxc_version"
  echo "date=$date_utc"
  echo "revision=$revision"
  echo "cpu=$model"
  echo "cores=$(nproc)"
  echo "kernel=$(uname -r)"
  echo "sshd=$sshd_version"
  echo "load_start=$load_start"
  echo "load_end=$load_end"
  echo "speed=$speed"
  echo "runs=$runs"
  echo "servers=$servers"
  echo "agent_version=$agent_version"
  echo "agent_kib=$agent_kib"
  echo "probe_kib=$probe_kib"
  for m in remote-fresh remote-warm local; do
    k=${m//-/_}
    echo "${k}_s=$(rmed "$m" ttr_s)"
    echo "${k}_min_s=$(col "$out/runs.tsv" ttr_s "$m" | minimum)"
    echo "${k}_max_s=$(col "$out/runs.tsv" ttr_s "$m" | maximum)"
    echo "${k}_runs_s=$(rlist "$m" ttr_s)"
    echo "${k}_server_ttr_median_s=$(rmed "$m" server_ttr_median_s)"
    echo "${k}_server_ttr_max_s=$(rmed "$m" server_ttr_max_s)"
    echo "${k}_launch_201_at_s=$(rmed "$m" launch_201_at_s)"
    echo "${k}_launch_202_at_s=$(rmed "$m" launch_202_at_s)"
    echo "${k}_last_ready_at_s=$(rmed "$m" last_ready_at_s)"
    echo "${k}_load1=$(rlist "$m" load1)"
  done
  echo "overhead_fresh_s=$over_fresh"
  echo "overhead_fresh_pct=$pct_fresh"
  echo "overhead_fresh_per_run_s=$(per_run_over remote-fresh)"
  echo "overhead_warm_s=$over_warm"
  echo "overhead_warm_pct=$pct_warm"
  echo "overhead_warm_per_run_s=$(per_run_over remote-warm)"
  for ct in "${ctids[@]}"; do
    for f in total_s status_s version_s init_s stage_s push_s start_s health_s logged_at_s; do
      echo "bootstrap_${ct}_${f}=$(bmed remote-fresh "$ct" "$f")"
    done
  done
} >"$out/summary.env"
awk -F= '{
    k = $1; v = substr($0, length(k) + 2)
    if (v ~ /^-?[0-9]+([.][0-9]+)?$/ || v == "true" || v == "false") f = sprintf("\"%s\":%s", k, v)
    else { gsub(/"/, "", v); f = sprintf("\"%s\":\"%s\"", k, v) }
    s = s (NR > 1 ? "," : "") f
  } END {print "{" s "}"}' "$out/summary.env" | tee "$out/summary.json"
echo "results: $out/summary.env, $out/summary.json, $out/runs.tsv, $out/bootstrap.tsv"

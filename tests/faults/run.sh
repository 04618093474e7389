#!/usr/bin/env bash
# The fault matrix (issue 12; results in docs/reliability.md). Runs a real fleet (fleetd, one
# fleet-agent in a simulated container in its own PID namespace, the simulated SGLang servers),
# injects one fault at a random moment, lets it clear, and checks the invariants with fault-check
# (tests/faults/fault_invariants.h) and the container's bystanders:
#
#   events_once          every event in the agent's agent.db is in fleet.db once, as written
#   attempts_contiguous  each server's attempt numbers are 1..N
#   launch_recorded      every launch an agent made has its attempt row; no row claims a launch
#                        that no agent made
#   launched_once        no attempt id launched twice
#   launches_match       server processes the container started (its own ledger) = launches the
#                        agents recorded, per GPU
#   bystanders           the container's processes that are not the supervisor's are alive, with
#                        the start time they had (nothing outside a server's group was signalled)
#   settled              after the fault cleared, every server READY within --settle seconds, no
#                        attempt left pending, no remediation left applying
#   integrity            PRAGMA integrity_check ok on fleet.db and every agent.db (fleet.db's
#                        only on SQLite: PostgreSQL has no such check; agent.db's always)
#
#   tests/faults/run.sh [--quick | --full] [--rows R1,R2,...] [--per-row N] [--seed S]
#                       [--speed X] [--gpus N] [--settle S] [--build-dir DIR] [--out DIR] [--keep]
#                       [--jobs N] [--store sqlite|postgres]
#
#   --store STORE    where fleetd keeps its record: sqlite (fleet.db, the default) or postgres
#                    (a real PostgreSQL server per injection, pg-test-server: its URL in a 0600
#                    file given to fleetd --store-file and fault-check --store-file, never in argv;
#                    fleetd then leads by its lease, and a fleetd that exits 75 having lost it is
#                    started again, as its systemd unit would). Rows that are SQLite's by nature
#                    are skipped on postgres (power-loss, fleetd-disk-full), db-crash on sqlite;
#                    the reason is printed. fleetd-busy holds a lock fleetd's writes need: SQLite's
#                    write lock, or PostgreSQL's LOCK TABLE servers IN EXCLUSIVE MODE
#   --quick          the cheapest rows, 1 injection each (the ctest subset, about 2 minutes;
#                    on postgres kill9-fleetd, kill9-agent and db-crash)
#   --full           every row, 20 injections each (the issue's matrix; see docs/reliability.md)
#   --rows LIST      rows to run (default: all; --list prints them)
#   --per-row N      injections per row (default 3; --full 20, --quick 1)
#   --seed S         the random seed (default: from the clock; printed either way)
#   --speed X        FLEET_SIM_SPEED of the simulated servers (default 20)
#   --gpus N         GPUs of the simulated container (default 4)
#   --settle S       seconds a fleet has to settle after a fault cleared (default 90)
#   --partition S    how long the partition row cuts fleetd off the container (default 60)
#   --ssh-step STEP  the ssh-* rows strike while the bootstrap runs STEP (stage, push or start),
#                    0-200 ms after the host began it, not at a random moment of the bootstrap
#   --build-dir DIR  the build with fleetd, fleet-agent, fleetctl, sglang-server-sim, fault-check
#                    (default build/)
#   --jobs N         injections run at once (default 1): each is a fleet of its own (its own
#                    directories, ports and namespaces); the moment and the choices of injection
#                    I come from the seed and I alone, so a seed means the same faults whatever N
#   --out DIR        each injection's state (default a new directory under /tmp); kept only for
#                    injections with a violation, unless --keep
#
# Prints a line per injection, a table per row (fault, injections, invariants held, time to
# recover median/max) and `faults: N injected, M invariant violations (seed S)`. Exits 0 when M is
# 0, 1 when not, 2 on a usage or setup error, 77 (skipped) when not root. Needs root (PID and mount namespaces, tmpfs mounts).
# Every process it starts is its own (pids, the namespaces it made), stopped on any exit; mounts
# are undone. Waits are on fleetd's log, its `status --until-ready`, FIFOs and process exits;
# the fault's own timing (when it strikes, how long it holds) is the only sleep.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=deploy/lib/fleet.sh  # (shellcheck run from the repository root)
source "$repo/deploy/lib/fleet.sh"
fleet_me=faults
fleet_die_status=2

all_rows=(kill9-fleetd kill9-agent kill9-both fleetd-sigterm-remediation fleetd-busy
  fleetd-disk-full agent-disk-full agent-wipe log-delete log-truncate log-rotate reboot power-loss
  partition clock-jump ssh-bootstrap-cut db-crash)
quick_rows=(kill9-fleetd kill9-agent fleetd-busy reboot)
quick_rows_postgres=(kill9-fleetd kill9-agent db-crash)

mode=default
rows_arg=
per_row=
seed=
speed=20
gpus=4
settle=90
partition=60
ssh_step=
build_dir=$repo/build
out=
keep=false
jobs=1
store=sqlite
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --rows) [[ $# -ge 2 ]] || usage; rows_arg=$2; shift ;;
    --per-row) [[ $# -ge 2 ]] || usage; per_row=$2; shift ;;
    --seed) [[ $# -ge 2 ]] || usage; seed=$2; shift ;;
    --speed) [[ $# -ge 2 ]] || usage; speed=$2; shift ;;
    --gpus) [[ $# -ge 2 ]] || usage; gpus=$2; shift ;;
    --settle) [[ $# -ge 2 ]] || usage; settle=$2; shift ;;
    --partition) [[ $# -ge 2 ]] || usage; partition=$2; shift ;;
    --ssh-step) [[ $# -ge 2 ]] || usage; ssh_step=$2; shift ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build_dir=$2; shift ;;
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift ;;
    --keep) keep=true ;;
    --jobs) [[ $# -ge 2 ]] || usage; jobs=$2; shift ;;
    --store) [[ $# -ge 2 ]] || usage; store=$2; shift ;;
    --list) printf '%s\n' "${all_rows[@]}"; exit 0 ;;
    -h | --help) usage ;;
    *) printf 'faults: unknown argument %s\n' "$1" >&2; usage ;;
  esac
  shift
done
if [[ $(id -u) != 0 ]]; then
  printf 'faults: skipped: needs root (PID and mount namespaces, tmpfs mounts)\n' >&2
  exit 77
fi
[[ $store =~ ^(sqlite|postgres)$ ]] || die "--store must be sqlite or postgres"
case $mode in
  quick)
    rows=("${quick_rows[@]}")
    [[ $store == sqlite ]] || rows=("${quick_rows_postgres[@]}")
    per_row=${per_row:-1} ;;
  full) rows=("${all_rows[@]}"); per_row=${per_row:-20} ;;
  *) rows=("${all_rows[@]}"); per_row=${per_row:-3} ;;
esac
if [[ -n $rows_arg ]]; then
  IFS=, read -r -a rows <<<"$rows_arg"
  for r in "${rows[@]}"; do
    [[ " ${all_rows[*]} " == *" $r "* ]] || die "unknown row '$r' (--list)"
  done
fi
# Rows that are one record's by nature: skipped on the other, with the reason.
skip_reason() {  # skip_reason ROW: why ROW does not run on this --store ("" when it does)
  case $store/$1 in
    postgres/power-loss) echo "SQLite's by nature: its VFS discards fleet.db's unsynced writes; a PostgreSQL server's durability is its own (db-crash kills the server instead)" ;;
    postgres/fleetd-disk-full) echo "SQLite's by nature: it fills fleet.db's filesystem; the record is in the PostgreSQL server's data directory" ;;
    sqlite/db-crash) echo "PostgreSQL's: it kills the database server, which fleet.db does not have (power-loss and kill9-fleetd are SQLite's)" ;;
  esac
}
kept=()
for r in "${rows[@]}"; do
  why=$(skip_reason "$r")
  if [[ -n $why ]]; then
    printf 'faults: %s skipped on %s: %s\n' "$r" "$store" "$why"
  else
    kept+=("$r")
  fi
done
((${#kept[@]} > 0)) || die "no row to run on $store"
rows=("${kept[@]}")
[[ $per_row =~ ^[1-9][0-9]*$ ]] || die "--per-row must be a positive integer"
[[ $gpus =~ ^[1-8]$ ]] || die "--gpus must be 1..8"
[[ $jobs =~ ^[1-9][0-9]?$ ]] || die "--jobs must be 1..99"
[[ $settle =~ ^[1-9][0-9]*$ ]] || die "--settle must be a positive integer"
[[ $partition =~ ^[1-9][0-9]*$ ]] || die "--partition must be a positive integer"
[[ $speed =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--speed must be a positive number"
[[ $ssh_step =~ ^(|stage|push|start)$ ]] || die "--ssh-step must be stage, push or start"
seed=${seed:-$(( $(date +%s%N) % 1000000007 ))}
[[ $seed =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer"
RANDOM=$seed

bin=$(cd -- "$build_dir" && pwd) || die "no build dir $build_dir"
fleetd_bin=$bin/daemon/fleetd
agent_bin=$bin/agent/fleet-agent
fleetctl_bin=$bin/cli/fleetctl
server_bin=$bin/tests/sim/sglang-server-sim
free_ports=$bin/tests/sim/sim-free-ports
check_bin=$bin/tests/faults/fault-check
proxy_bin=$bin/tests/faults/fault-proxy
pg_server_bin=$bin/tests/faults/pg-test-server
needed=("$fleetd_bin" "$agent_bin" "$fleetctl_bin" "$server_bin" "$free_ports" "$check_bin" "$proxy_bin")
[[ $store == sqlite ]] || needed+=("$pg_server_bin")
for b in "${needed[@]}"; do
  [[ -x $b ]] || die "missing $b (build fleetd fleet-agent fleet-http-probe fleetctl sglang-server-sim sim-free-ports fault-check fault-proxy, and pg-test-server for --store postgres)"
done
if [[ $store == postgres ]] && ! command -v initdb >/dev/null &&
  ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  printf 'faults: skipped: --store postgres needs PostgreSQL (initdb)\n' >&2
  exit 77
fi
if [[ -z $out ]]; then
  out=$(mktemp -d /tmp/gpu-fleet-faults.XXXXXX)
else
  mkdir -p -- "$out"
  out=$(cd -- "$out" && pwd)
fi
chmod 0700 "$out"

# --- The state of one injection (reset by begin_run) --------------------------------------------

run_dir='' fstate='' astate='' world='' logs='' ledger='' base_port='' cursor_seen=''
fleetd_pid='' ct_unshare='' ct_init='' agent_nsenter='' agent_pid='' proxy_pid=''
fleetd_mark=0  # the lines of fleetd.log before the running fleetd's
pg_pid='' store_file=''  # --store postgres: the injection's pg-test-server, its URL's file
fleetd_db_args=() agent_db_args=()  # the power-loss row's VFS and boot id
ct_name=local/200 in_ct=()  # the container as fleetd names it; the command prefix that enters it
host_dir='' host_ns='' host_if='' ct_ns='' ct_addr=''  # a remote row's simulated host
mounts=()
bystanders=()  # "HOSTPID STARTTICKS" of the processes that must survive
old_agent_dbs=()
notes=()

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# rand_ms LO HI: a random number of milliseconds in [LO, HI).
rand_ms() { echo $(( $1 + (RANDOM * 32768 + RANDOM) % ($2 - $1) )); }
sleep_ms() { sleep "$(awk -v m="$1" 'BEGIN { printf "%.3f", m / 1000 }')"; }
start_ticks() { awk '{ print $22 }' "/proc/$1/stat" 2>/dev/null || true; }
children_of() { cat "/proc/$1/task/$1/children" 2>/dev/null || true; }
fleetctl() { "$fleetctl_bin" --state-dir "$fstate" "$@"; }

# A process we started has a child we need (unshare's init, nsenter's agent): wait for it.
# Bounded poll: the kernel gives no event for "forked".
child_of() {
  local parent=$1 tries c
  for ((tries = 0; tries < 500; tries++)); do
    c=$(children_of "$parent")
    if [[ -n $c ]]; then
      printf '%s' "${c%% *}"
      return 0
    fi
    kill -0 "$parent" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# (This script's own, in place of deploy/lib/fleet.sh's: any signal, and the time it took noted.)
stop_pid() {  # stop_pid PID SIGNAL: signal a process we started and wait for it (bounded)
  local pid=$1 t
  [[ -n $pid ]] || return 0
  t=$(now)
  kill "-$2" "$pid" 2>/dev/null || true
  if ! timeout 30 tail -f --pid="$pid" /dev/null 2>/dev/null; then
    notes+=("pid $pid still ran 30 s after SIG$2: killed")
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  [[ $2 == KILL ]] || notes+=("SIG$2 to exit $(elapsed "$t" "$(now)")s")
}

# --- fleetd -------------------------------------------------------------------------------------

start_fleetd() {
  local mark
  mark=0
  [[ ! -e $run_dir/fleetd.log ]] || mark=$(wc -l <"$run_dir/fleetd.log")
  fleetd_mark=$mark
  "$fleetd_bin" --state-dir "$fstate" --clock-offset-file "$run_dir/clock-offset" \
    ${fleetd_db_args[@]+"${fleetd_db_args[@]}"} 2>>"$run_dir/fleetd.log" &
  fleetd_pid=$!
  disown "$fleetd_pid"  # no job notice when it is killed; bash still reaps it
  if ! timeout 30 grep -q -m1 -F 'serving on' < <(exec tail -n +"$((mark + 1))" -F --pid="$fleetd_pid" "$run_dir/fleetd.log" 2>/dev/null); then
    notes+=("fleetd did not start")
    return 1
  fi
}
# On PostgreSQL a fleetd stands by until it holds the lease: the first one of an injection leads
# at once (nobody holds it), and the config is deployed to it once it says so.
await_leading() {
  [[ $store == postgres ]] || return 0
  if ! timeout 30 grep -q -m1 -F 'leading fleet' < <(exec tail -n +"$((fleetd_mark + 1))" -F --pid="$fleetd_pid" "$run_dir/fleetd.log" 2>/dev/null); then
    notes+=("fleetd did not lead")
    return 1
  fi
}
# On PostgreSQL a fleetd restarted (or one that came back after its database) acts only once it
# leads again: until then it answers status from the record, and the fleet is not supervised.
fleetd_leads() {
  [[ $store == postgres ]] || return 0
  tail -n +"$((fleetd_mark + 1))" "$run_dir/fleetd.log" | grep -q -F 'leading fleet'
}
# On PostgreSQL a leader that could not renew its lease in time (the database away) exits 75
# having done nothing more; its unit (deploy/fleetd-ha.service: Restart=on-failure) starts it
# again as a standby. The harness does what the unit does, and says so. Returns 1 when fleetd
# is gone for another reason.
supervise_fleetd() {
  [[ $store == postgres && -n $fleetd_pid ]] || return 0
  kill -0 "$fleetd_pid" 2>/dev/null && return 0
  if tail -n +"$((fleetd_mark + 1))" "$run_dir/fleetd.log" | grep -q -F 'restart me as a standby'; then
    notes+=("fleetd exited 75 (its lease): started again, as its unit would")
    start_fleetd
    return
  fi
  notes+=("fleetd exited")
  fleetd_pid=''
  return 1
}

# --- The record's database (--store postgres): a real PostgreSQL server per injection -------------

# start_store: pg-test-server up (initdb, postgres as nobody, a unix socket in a temp dir of its
# own); its URL in $run_dir/store.url (0600), fleetd told to use it.
start_store() {
  [[ $store == postgres ]] || return 0
  store_file=$run_dir/store.url
  "$pg_server_bin" "$store_file" >"$run_dir/pg.out" 2>>"$run_dir/pg.log" </dev/null &
  pg_pid=$!
  if ! timeout 120 grep -q -m1 -x ready < <(exec tail -n +1 -F --pid="$pg_pid" "$run_dir/pg.out" 2>/dev/null); then
    notes+=("the database did not start: $(tail -1 "$run_dir/pg.log" 2>/dev/null)")
    return 1
  fi
  fleetd_db_args=(--store-file "$store_file")
}
stop_store() {
  [[ -n $pg_pid ]] || return 0
  kill -TERM "$pg_pid" 2>/dev/null || true
  if ! timeout 60 tail -f --pid="$pg_pid" /dev/null 2>/dev/null; then
    notes+=("pg-test-server still ran 60 s after SIGTERM: killed (its postgres may be left)")
    kill -KILL "$pg_pid" 2>/dev/null || true
  fi
  wait "$pg_pid" 2>/dev/null || true
  pg_pid=''
}
# record_query NAME: what fleetd's record says (fault-check --query: cursor, applying); "" when
# it cannot be read. SQLite's fleet.db is read by sqlite3 read-only, as it always was.
record_query() {
  if [[ $store == postgres ]]; then
    "$check_bin" --store-file "$store_file" --query "$1" 2>/dev/null || true
    return
  fi
  case $1 in
    cursor) sqlite3 "file:$fstate/fleet.db?mode=ro" "SELECT incarnation || '#' || sequence FROM agent_cursors" 2>/dev/null || true ;;
    applying) sqlite3 "file:$fstate/fleet.db?mode=ro" "SELECT count(*) FROM remediations WHERE status = 'applying'" 2>/dev/null || true ;;
  esac
}
# The arguments that name fleetd's record to fault-check.
record_args() {
  if [[ $store == postgres ]]; then
    printf '%s\n' --store-file "$store_file"
  else
    printf '%s\n' --fleet-db "$fstate/fleet.db"
  fi
}
kill_fleetd() { stop_pid "$fleetd_pid" "${1:-KILL}"; fleetd_pid=''; }

# --- The container: a PID namespace with bystanders, the agent entered into it --------------------

start_container() {  # start_container [TAKE_PIDS_FILE]
  local fifo=$run_dir/ready.fifo line c
  rm -f "$fifo"
  mkfifo "$fifo"
  unshare --pid --fork --mount-proc --propagation slave bash "$here/container_init.sh" "$fifo" "${1:-}" \
    </dev/null >>"$run_dir/container.log" 2>&1 &
  ct_unshare=$!
  if ! read -r -t 20 line <"$fifo" || [[ $line != ready ]]; then
    notes+=("the container did not start")
    return 1
  fi
  ct_init=$(child_of "$ct_unshare") || { notes+=("no container init"); return 1; }
  for c in $(children_of "$ct_init"); do bystanders+=("$c $(start_ticks "$c")"); done
}

start_agent() {
  nsenter -t "$ct_init" -p -m -- "$agent_bin" --listen "unix:$run_dir/agent.sock" \
    --state-dir "$astate" --host local --container 200 --readiness-interval 0.5 --stop-grace 5 \
    --clock-offset-file "$run_dir/clock-offset" ${agent_db_args[@]+"${agent_db_args[@]}"} \
    </dev/null 2>>"$run_dir/agent.log" &
  agent_nsenter=$!
  agent_pid=$(child_of "$agent_nsenter") || { notes+=("the agent did not start"); return 1; }
}
kill_agent() {
  if [[ -n $agent_pid ]]; then kill -KILL "$agent_pid" 2>/dev/null || true; fi
  if [[ -n $agent_nsenter ]]; then wait "$agent_nsenter" 2>/dev/null || true; fi
  agent_pid='' agent_nsenter=''
}
# Every process of the container dies at once (its init is killed: the kernel kills the rest).
kill_container() {
  if [[ -n $ct_init ]]; then kill -KILL "$ct_init" 2>/dev/null || true; fi
  if [[ -n $ct_unshare ]]; then wait "$ct_unshare" 2>/dev/null || true; fi
  if [[ -n $agent_nsenter ]]; then wait "$agent_nsenter" 2>/dev/null || true; fi
  ct_init='' ct_unshare='' agent_pid='' agent_nsenter=''
}

# --- A remote container (the ssh-* rows): a simulated Proxmox host, fleetd bootstraps the agent ---
#
# tests/sim/sim_proxmox_host.sh makes the host: a network namespace behind a veth pair, a real
# sshd of its own (own host key, root's authorized_keys, no system service) and `pct` =
# tests/sim/pct-sim, with container 200 (a network namespace and a chroot) behind its bridge.
# fleetd reaches the host over SSH and the agent over the `direct` channel (mutual TLS, routed
# through the host), and installs the agent itself (daemon/remote/agent_bootstrap.h); no agent is started
# here. The container sees the run's share/ (world, logs, launch ledger), the build and the repo at
# the same paths.

is_remote() { [[ $1 == ssh-* ]]; }

# start_remote_host: the host up, our key authorized, its host key in our known_hosts, the
# fleet's certificates; sets the host_* and ct_* variables, astate (the agent's state in the
# container) and in_ct.
start_remote_host() {
  local up=$run_dir/host.up key_type key_text host_addr
  host_dir=$run_dir/host
  if ! bash "$repo/tests/sim/sim_proxmox_host.sh" up "$host_dir" 200 --route \
    --bind "$run_dir/share" --bind "$bin" --bind "$repo" >"$up" 2>&1; then
    notes+=("the simulated host did not come up: $(tail -1 "$up")")
    return 1
  fi
  host_addr=$(sed -n 's/^host_addr=//p' "$up")
  ct_addr=$(sed -n 's/^ct_200=//p' "$up")
  # shellcheck disable=SC1091  # the host's state: root_if and namespaces (host first)
  host_ns=$(source "$host_dir/state" && printf '%s' "${namespaces[0]}")
  # shellcheck disable=SC1091
  host_if=$(source "$host_dir/state" && printf '%s' "${root_if%-r}-h")
  ct_ns=$(<"$host_dir/ct/200/netns")
  ct_name=pve1/200 in_ct=(ip netns exec "$ct_ns")
  astate=$host_dir/ct/200/rootfs/var/lib/gpu-fleet-agent
  ssh-keygen -q -t ed25519 -N '' -C gpu-fleet-faults -f "$run_dir/id_ed25519"
  cat "$run_dir/id_ed25519.pub" >>"$host_dir/authorized_keys"
  read -r key_type key_text _ <"$(sed -n 's/^host_key=//p' "$up")"
  printf '%s %s %s\n' "$host_addr" "$key_type" "$key_text" >"$run_dir/known_hosts"
  "$fleetctl_bin" certs init --dir "$run_dir/pki" --agents "$ct_addr" >"$run_dir/certs.log" 2>&1 ||
    { notes+=("fleetctl certs init failed"); return 1; }
  printf '%s %s\n' "$host_addr" "$ct_addr" >"$run_dir/addresses"
}

# The config of the remote container (the same world, template and policy as the local one).
remote_config() {
  local g gpu_list= y=("$run_dir/id_ed25519" "$run_dir/known_hosts" "$run_dir/pki")
  for ((g = 0; g < gpus; g++)); do gpu_list+="${gpu_list:+, }$g"; done
  printf '# written by tests/faults/run.sh: container 200 on the simulated host pve1\nhosts:\n'
  printf '  - name: pve1\n    reach: {kind: ssh, address: %s, identity_file: "%s", known_hosts: "%s"}\n' \
    "$(cut -d' ' -f1 "$run_dir/addresses")" "${y[0]}" "${y[1]}"
  printf '    containers:\n      - ctid: "200"\n'
  printf '        channel: {kind: direct, address: %s, port: 50151, ca_file: "%s", cert_file: "%s", key_file: "%s", agent_cert_file: "%s", agent_key_file: "%s"}\n' \
    "$ct_addr" "${y[2]}/ca.crt" "${y[2]}/fleetd.crt" "${y[2]}/fleetd.key" \
    "${y[2]}/agent-$ct_addr.crt" "${y[2]}/agent-$ct_addr.key"
  printf '        gpus: [%s]\n        template: sglang\n        base_port: %d\n' "$gpu_list" "$base_port"
  bash "$repo/tests/sim/sim_fleet_config.sh" --world "$world" --tools-only
  printf 'templates:\n'
  bash "$repo/tests/sim/sim_fleet_config.sh" --world "$world" --template-only sglang \
    --log-path "$logs/sglang_gpu{gpu}.log" --speed "$speed"
  printf 'policies:\n  - name: default\n    max_attempts: 3\n    backoff_initial: 1s\n'
}

stop_remote_host() {
  [[ -n $host_dir ]] || return 0
  bash "$repo/tests/sim/sim_proxmox_host.sh" down "$host_dir" 2>>"$run_dir/host.up" || true
  host_dir=''
}

# The host's link (its end of the veth pair) down or up: a host unreachable, as when its cable
# or switch port goes: packets to it are lost, connections stall, new ones time out.
host_link() { ip -n "$host_ns" link set "$host_if" "$1"; }

# The host's sshd drops every session it has (what a host whose side of a stalled connection
# timed out does), the listener stays: every sshd process below it (each connection's monitor
# and its session process, which holds the connection) is killed.
kill_host_sessions() {
  local pids
  pids=$(ps -e -o pid=,ppid=,comm= 2>/dev/null | awk -v root="$(<"$host_dir/sshd.pid")" '
    { ppid[$1] = $2; comm[$1] = $3 }
    END {
      for (p in ppid) {
        if (comm[p] != "sshd" || p == root) continue
        d = 0
        for (q = ppid[p]; q in ppid && q != root && d < 50; q = ppid[q]) d++
        if (q == root) print p
      }
    }')
  # shellcheck disable=SC2086  # a list of pids
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  printf '%d' "$(wc -w <<<"$pids")"
}

# What the host runs for fleetd now (the bootstrap's step): the commands below its sshd
# sessions, the deepest one (the command itself, not the shells and `timeout` around it).
host_commands() {
  ps -e -o pid=,ppid=,args= 2>/dev/null | awk -v root="$(<"$host_dir/sshd.pid")" '
    { ppid[$1] = $2; line = $0; sub(/^ *[0-9]+ +[0-9]+ +/, "", line); args[$1] = line }
    END {
      for (p in ppid) {
        d = 0
        for (q = p; q in ppid && q != root && d < 50; q = ppid[q]) d++
        if (q == root && args[p] !~ /^sshd/ && d > best) { best = d; cmd = args[p] }
      }
      print substr(cmd, 1, 90)
    }'
}

# The bootstrap's own invariants, once the fleet settled (violations on stdout):
#   bootstrap_one_agent  exactly one fleet-agent runs in the container, the one its pid file names
#   bootstrap_no_secret  nothing staged is left on the host (its staging directory is empty); the
#                        agent's private key is nowhere on the host, nor in the container but at
#                        /etc/gpu-fleet/agent.key (mode 0600), and no half-installed file (*.new)
#                        is left in the container
#   bootstrap_logged     fleetd logged the agent it installed; or, when the fault cut the
#                        bootstrap off (bootstrap_cut) after it had started the agent (the next
#                        one finds it up to date and installs nothing), that the agent was
#                        unreachable and why, and that it is reachable again
bootstrap_cut=false
check_bootstrap() {
  local pid agents=() pidfile rootfs=$host_dir/ct/200/rootfs key_line f leaks=()
  for pid in $(ip netns pids "$ct_ns" 2>/dev/null); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == fleet-agent ]] && agents+=("$pid")
  done
  pidfile=$(cat "$rootfs/run/gpu-fleet-agent.pid" 2>/dev/null || true)
  if ((${#agents[@]} != 1)); then
    printf 'violation: bootstrap_one_agent: %d fleet-agent processes in the container (%s)\n' \
      "${#agents[@]}" "${agents[*]}"
  elif [[ $pidfile != "${agents[0]}" ]]; then
    # The pid file holds the pid as the container sees it; without a PID namespace of its own
    # that is the same pid.
    printf 'violation: bootstrap_one_agent: the agent is pid %s, its pid file says %s\n' \
      "${agents[0]}" "${pidfile:-nothing}"
  fi
  f=$(find "$host_dir/root-home/.gpu-fleet-bootstrap" -mindepth 1 2>/dev/null | head -5 | tr '\n' ' ')
  [[ -z $f ]] || printf 'violation: bootstrap_no_secret: left staged on the host: %s\n' "$f"
  # A line of the key's body: in no file of the host's (root's home, /tmp) but the ones fleetd
  # was given and the container's installed key. The host's /tmp is this machine's: only files
  # written since the run began are read.
  key_line=$(sed -n 2p "$run_dir/pki/agent-$ct_addr.key")
  while IFS= read -r f; do
    [[ $f == "$rootfs/etc/gpu-fleet/agent.key" ]] || leaks+=("$f")
  done < <({ find "$host_dir/root-home" "$rootfs" -xdev -type f -size -64k 2>/dev/null
    find /tmp -xdev -type f -newer "$run_dir/started" -size -64k -not -path "$out/*" 2>/dev/null; } |
    xargs -r -d '\n' grep -lsF -- "$key_line" 2>/dev/null || true)
  ((${#leaks[@]} == 0)) ||
    printf 'violation: bootstrap_no_secret: the agent key is also in %s\n' "${leaks[*]}"
  [[ $(stat -c %a "$rootfs/etc/gpu-fleet/agent.key" 2>/dev/null) == 600 ]] ||
    printf 'violation: bootstrap_no_secret: /etc/gpu-fleet/agent.key is not 0600 in the container\n'
  f=$(find "$rootfs/etc/gpu-fleet" "$rootfs/opt/gpu-fleet" -name '*.new' 2>/dev/null | tr '\n' ' ')
  [[ -z $f ]] || printf 'violation: bootstrap_no_secret: half-installed files left: %s\n' "$f"
  local installed=false
  grep -qE 'container 200: .* started \(' "$run_dir/fleetd.log" && installed=true
  if $installed; then
    :
  elif [[ $bootstrap_cut != true ]]; then
    printf 'violation: bootstrap_logged: fleetd logged no agent installed in pve1/200\n'
  else
    grep -qF 'container=pve1/200 agent unreachable: host pve1' "$run_dir/fleetd.log" ||
      printf 'violation: bootstrap_logged: the bootstrap was cut off, fleetd logged no reason\n'
    grep -qF 'container=pve1/200 agent reachable again' "$run_dir/fleetd.log" ||
      printf 'violation: bootstrap_logged: fleetd logged neither the agent installed nor reachable again\n'
  fi
}

# --- One injection ------------------------------------------------------------------------------

mount_small_fs() {  # mount_small_fs DIR: a 32 MiB tmpfs (the disk that fills)
  mkdir -p "$1"
  mount -t tmpfs -o size=32m,mode=0700 tmpfs "$1"
  mounts+=("$1")
}

stop_fleet() {
  kill_fleetd TERM
  kill_container
  stop_remote_host
  if [[ -n $proxy_pid ]]; then
    kill -CONT "$proxy_pid" 2>/dev/null || true
    stop_pid "$proxy_pid" TERM
    proxy_pid=''
  fi
}
unmount_all() {
  local m
  for m in ${mounts[@]+"${mounts[@]}"}; do umount -l "$m" 2>/dev/null || true; done
  mounts=()
}
teardown() {
  stop_fleet
  stop_store
  unmount_all
}
on_exit() {
  local rc=$?
  trap - EXIT
  # Injections running in subshells (--jobs) stop too: each tears its own fleet down.
  local p
  for p in $(jobs -p); do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  teardown
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

begin_run() {  # begin_run ROW K SCENARIO
  run_dir=$out/$1-$2
  rm -rf -- "$run_dir"
  mkdir -p "$run_dir"
  # A remote container sees share/ (the world, the servers' logs, the launch ledger).
  local share=$run_dir
  is_remote "$1" && share=$run_dir/share
  fstate=$run_dir/fleetd astate=$run_dir/agent-state world=$share/world logs=$share/logs
  ledger=$share/launches
  bystanders=() old_agent_dbs=() notes=() ct_name=local/200 in_ct=() bootstrap_cut=false
  fleetd_db_args=() agent_db_args=() store_file=''
  start_store || return 1
  mkdir -p "$logs"
  : >"$run_dir/started"
  : >"$ledger"
  case $1 in
    fleetd-disk-full) mount_small_fs "$fstate" ;;
    agent-disk-full) mount_small_fs "$astate" ;;
    power-loss)
      # Both databases through the VFS that can lose what was not synced (fault-check
      # --power-cut); the agent reads the machine's boot id from a file the power cut renews.
      fleetd_db_args=(--db-vfs fleet-powerloss)
      agent_db_args=(--db-vfs fleet-powerloss --boot-id-file "$run_dir/boot_id")
      cat /proc/sys/kernel/random/uuid >"$run_dir/boot_id" ;;
  esac
  mkdir -p "$fstate"
  is_remote "$1" || mkdir -p "$astate"
  local state=seed
  [[ $3 == steady ]] && state=fixed
  bash "$repo/tests/sim/make_sim_world.sh" "$world" --state "$state" --server "$server_bin" \
    --gpus "$gpus" >"$run_dir/world.log" 2>&1
  # The world's python is a witness: it writes a line to the launch ledger (GPU, pid, time) and
  # becomes the simulated server under its own name (the sim finds its venv from argv[0]).
  rm "$world/venv/bin/python"
  # shellcheck disable=SC2016  # the witness script's own variables
  printf '#!/bin/bash\nprintf "%%s %%s %%s\\n" "${CUDA_VISIBLE_DEVICES:-?}" "$$" "$EPOCHREALTIME" >>%q\nexec -a "$0" %q "$@"\n' \
    "$ledger" "$server_bin" >"$world/venv/bin/python"
  chmod 755 "$world/venv/bin/python"
  # Consecutive free ports outside the ephemeral range (a parallel test's port-0 bind cannot
  # take one): a server's port is base_port + gpu.
  base_port=$(free_base_port "$gpus") || die "sim-free-ports failed"
  if is_remote "$1"; then
    start_remote_host || return 1
    remote_config >"$run_dir/fleet.yaml"
    start_fleetd && await_leading
    return
  fi
  # The partition row puts a link (fault-proxy) between fleetd and the agent's socket.
  local channel=$run_dir/agent.sock
  if [[ $1 == partition ]]; then
    channel=$run_dir/link.sock
    "$proxy_bin" "$channel" "$run_dir/agent.sock" 2>>"$run_dir/proxy.log" &
    proxy_pid=$!
  fi
  bash "$repo/tests/sim/sim_fleet_config.sh" --world "$world" --socket "$channel" \
    --base-port "$base_port" --logs "$logs" --speed "$speed" \
    --comment "written by tests/faults/run.sh" >"$run_dir/fleet.yaml"
  start_fleetd && await_leading && start_container && start_agent
}

# True when fleetd has read the agent's stream to its end: its cursor names the agent's
# incarnation and last sequence (so it has seen what the fault did).
cursor_caught_up() {
  local agent_at fleet_at
  agent_at=$(sqlite3 "file:$astate/agent.db?mode=ro" \
    "SELECT (SELECT value FROM meta WHERE key = 'incarnation') || '#' || ifnull((SELECT max(seq) FROM events), 0)" 2>/dev/null || true)
  fleet_at=$(record_query cursor)
  cursor_seen="fleetd at ${fleet_at:-none}, the agent at ${agent_at:-none}"
  [[ -n $agent_at && $agent_at == "$fleet_at" ]]
}

# True when every server answers GET /health with 200 on its port (the servers really serve).
servers_answer() {
  local g line
  for ((g = 0; g < gpus; g++)); do
    # shellcheck disable=SC2016  # the inner script's own argument
    line=$(timeout 2 ${in_ct[@]+"${in_ct[@]}"} bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && head -1 <&3' _ \
      "$((base_port + g))" 2>/dev/null || true)
    [[ $line == *" 200 "* ]] || return 1
  done
}

# Waits until the fleet settled, at most --settle seconds: fleetd says every server is READY (on
# PostgreSQL: and leads), it has read the agent's stream to its end, and every server answers on
# its port. A poll every 0.25 s (no single event says all three). Not `status --watch --until-ready`: after a fleetd
# restart its first snapshot is empty and nothing more comes on a fleet where nothing changes
# (docs/reliability.md, findings). Returns 2 as soon as a server GAVE_UP.
wait_settled() {
  local deadline=$((SECONDS + settle)) json ready gave_up
  cursor_seen=
  while ((SECONDS < deadline)); do
    supervise_fleetd || return 1
    json=$("$fleetctl_bin" --state-dir "$fstate" --timeout 5s status -o json 2>>"$run_dir/fleetctl.log" || true)
    ready=$(grep -o '"state":"READY"' <<<"$json" | wc -l || true)
    gave_up=$(grep -c '"state":"GAVE_UP"' <<<"$json" || true)
    if ((gave_up > 0)); then notes+=("a server gave up"); return 2; fi
    if ((ready == gpus)) && fleetd_leads && cursor_caught_up && servers_answer; then return 0; fi
    sleep 0.25
  done
  notes+=("not settled within ${settle}s (${cursor_seen:-cursor not read})")
  return 1
}

# A disk that fills: the filler takes every free block until the fault clears.
fill_disk() { dd if=/dev/zero of="$1/.filler" bs=64k status=none 2>/dev/null || true; sync -f "$1" 2>/dev/null || true; }

# The log of the server that started last, or of GPU 0.
target_log() {
  local gpu
  gpu=$(awk 'END { print $1 }' "$ledger")
  [[ $gpu =~ ^[0-9]+$ ]] || gpu=0
  printf '%s/sglang_gpu%s.log' "$logs" "$gpu"
}

# inject ROW: the fault, at a random moment of the start (seed) or of a READY fleet (steady).
# Sets fault_cleared (the time the fault ended) and adds what it did to notes.
inject() {
  local row=$1 moment hold log holder_fifo holder line tries
  if [[ $row == fleetd-sigterm-remediation ]]; then
    # The moment is inside a remediation: from the deploy, a poll of fleet.db until one is
    # applying (nothing announces it), then 0-300 ms more.
    for ((tries = 0; tries < 1500; tries++)); do
      if [[ $(record_query applying) == [1-9]* ]]; then
        notes+=("remediation applying")
        break
      fi
      sleep 0.01
    done
    moment=$(rand_ms 0 300)
  elif [[ -n $ssh_step ]] && is_remote "$row"; then
    # The moment is inside a step of the bootstrap: a poll of the host's commands until it runs
    # the step (nothing announces it), then 0-200 ms more.
    local pattern deadline=$((SECONDS + 30))
    case $ssh_step in
      stage) pattern="^dd of=/root/\\.gpu-fleet-bootstrap/200/" ;;
      push) pattern="pct-sim --root $host_dir/ct push " ;;
      start) pattern="--listen $ct_addr:50151 .* --detach" ;;
    esac
    while ((SECONDS < deadline)); do
      if pgrep -f -- "$pattern" >/dev/null; then notes+=("in $ssh_step"); break; fi
      sleep 0.01
    done
    moment=$(rand_ms 0 200)
  else
    moment=$(rand_ms 0 "$window_ms")
  fi
  sleep_ms "$moment"
  notes+=("at ${moment}ms")
  case $row in
    kill9-fleetd)
      kill_fleetd KILL; fault_cleared=$(now); start_fleetd ;;
    kill9-agent)
      kill_agent; fault_cleared=$(now); start_agent ;;
    kill9-both)
      kill_agent; kill_fleetd KILL; fault_cleared=$(now); start_fleetd; start_agent ;;
    fleetd-sigterm-remediation)
      kill_fleetd TERM; fault_cleared=$(now); start_fleetd ;;
    fleetd-busy)
      # An outside writer holds BEGIN IMMEDIATE on fleet.db for 3-10 s (fleetd's busy timeout is 5 s);
      # on PostgreSQL an outside session holds LOCK TABLE servers IN EXCLUSIVE MODE as long
      # (every turn's write needs the table; fleetd's lease is renewed on a session of its own).
      hold=$(rand_ms 3000 10000)
      holder_fifo=$run_dir/holder.fifo
      mkfifo "$holder_fifo"
      if [[ $store == postgres ]]; then
        "$check_bin" --store-file "$store_file" --hold-lock "$hold" >"$holder_fifo" 2>>"$run_dir/holder.log" &
      else
        { printf '.timeout 10000\nBEGIN IMMEDIATE;\nSELECT '"'"'locked'"'"';\n'
          sleep_ms "$hold"
          printf 'COMMIT;\n'; } | sqlite3 "$fstate/fleet.db" >"$holder_fifo" 2>>"$run_dir/holder.log" &
      fi
      holder=$!
      read -r -t 15 line <"$holder_fifo" || true
      notes+=("held ${hold}ms ($line)")
      wait "$holder" 2>/dev/null || true
      fault_cleared=$(now) ;;
    fleetd-disk-full | agent-disk-full)
      local fs=$fstate
      [[ $row == agent-disk-full ]] && fs=$astate
      hold=$(rand_ms 2000 8000)
      fill_disk "$fs"
      sleep_ms "$hold"
      rm -f "$fs/.filler"
      notes+=("full for ${hold}ms")
      fault_cleared=$(now) ;;
    agent-wipe)
      kill_agent
      local copy=$run_dir/agent-state.wiped.${#old_agent_dbs[@]}
      cp -a "$astate" "$copy"
      old_agent_dbs+=("$copy/agent.db")
      find "$astate" -mindepth 1 -delete
      fault_cleared=$(now); start_agent ;;
    log-delete | log-truncate | log-rotate)
      # The log must be there to be faulted: wait for it (bounded poll, 10 s).
      log=$(target_log)
      for ((tries = 0; tries < 100; tries++)); do [[ -e $log ]] && break; sleep 0.1; done
      ;;&
    log-delete)
      log=$(target_log); rm -f "$log"; notes+=("deleted ${log##*/}"); fault_cleared=$(now) ;;
    log-truncate)
      log=$(target_log); [[ -e $log ]] && : >"$log"; notes+=("truncated ${log##*/}"); fault_cleared=$(now) ;;
    log-rotate)
      log=$(target_log); [[ -e $log ]] && mv "$log" "$log.1"; notes+=("rotated ${log##*/}"); fault_cleared=$(now) ;;
    partition)
      # fleetd and the container cannot talk for --partition seconds (the link stops relaying;
      # connections stay open, as when a route drops packets).
      kill -STOP "$proxy_pid"
      sleep "$partition"
      kill -CONT "$proxy_pid"
      notes+=("cut for ${partition}s")
      fault_cleared=$(now) ;;
    clock-jump)
      # The wall clock fleetd and the agent see steps an hour forward or back while they run
      # (their --clock-offset-file: the machine's clock is not touched), and stays there.
      local step=3600
      ((RANDOM % 2 == 0)) || step=-3600
      printf '%d\n' "$step" >"$run_dir/clock-offset.tmp"
      mv "$run_dir/clock-offset.tmp" "$run_dir/clock-offset"
      notes+=("stepped ${step}s")
      fault_cleared=$(now) ;;
    reboot)
      # Every process of the container dies; in the new PID namespace bystanders take the pids
      # the agent recorded for its servers, before the agent starts again.
      kill_container
      local take=$run_dir/take-pids
      "$check_bin" --recorded-pids "$astate/agent.db" 2>>"$run_dir/check.log" | awk '{ print $2 }' | sort -n >"$take" || true
      notes+=("recorded pids $(tr '\n' ' ' <"$take")")
      bystanders=()  # the old container's died with it, as they should
      start_container "$take"
      fault_cleared=$(now); start_agent ;;
    power-loss)
      # The machine loses power: fleetd, the agent and the container's processes die at once;
      # each database loses every write since its last completed sync (fault-check --power-cut
      # undoes them); the machine boots with a new boot id. Then as in the reboot row: in the new
      # PID namespace bystanders take the pids the agent's record (what is left of it) names.
      kill -KILL "$fleetd_pid" "$ct_init" 2>/dev/null || true
      kill_fleetd KILL
      kill_container
      # What the agent did is what its record held before the cut (as the agent-wipe row keeps
      # the wiped one): launches are checked against it; the cut loses the record, not the launch.
      local copy=$run_dir/agent-state.before-cut
      cp -a "$astate" "$copy"
      old_agent_dbs+=("$copy/agent.db")
      notes+=("cut: $("$check_bin" --power-cut "$fstate" --power-cut "$astate" 2>>"$run_dir/check.log" | tr '\n' ';')")
      cat /proc/sys/kernel/random/uuid >"$run_dir/boot_id"
      local take=$run_dir/take-pids
      "$check_bin" --recorded-pids "$astate/agent.db" 2>>"$run_dir/check.log" | awk '{ print $2 }' | sort -n >"$take" || true
      notes+=("recorded pids $(tr '\n' ' ' <"$take")")
      bystanders=()
      start_container "$take"
      fault_cleared=$(now); start_fleetd; start_agent ;;
    db-crash)
      # The PostgreSQL server crashes (every process of it SIGKILLed) and is started again at
      # once on the same data (crash recovery); fleetd carries on (or, when the server was away
      # past its lease, exits 75 and is started again: supervise_fleetd).
      kill -USR1 "$pg_pid"
      line=$(timeout 120 grep -m1 -E '^restart' < <(exec tail -n +2 -F --pid="$pg_pid" "$run_dir/pg.out" 2>/dev/null) || true)
      [[ $line == restarted* ]] || printf 'violation: db-crash: the database did not come back (%s)\n' \
        "$(tail -1 "$run_dir/pg.log")" >>"$run_dir/violations"
      notes+=("database killed and restarted")
      fault_cleared=$(now) ;;
    ssh-bootstrap-cut)
      # The host is unreachable for 2-12 s at a random moment of the agent's bootstrap (its
      # link down: what fleetd meets when a host's network goes). In the even injections the
      # host also drops its SSH sessions meanwhile, as a host does whose side of a stalled
      # connection timed out: fleetd's connections are then reset when the host is back, and
      # the bootstrap must start again; in the odd ones they stall and resume. (k: run_one's.)
      hold=$(rand_ms 2000 12000)
      local reset=$((k % 2 == 0)) what
      what=$(host_commands)
      host_link down
      notes+=("host ran: ${what:-nothing}")
      # Sessions dropped before the bootstrap ended: it fails, and fleetd must say so.
      if ((reset == 1)); then
        notes+=("$(kill_host_sessions) sessions dropped")
        grep -qE 'container 200: .* started \(' "$run_dir/fleetd.log" || bootstrap_cut=true
      fi
      sleep_ms "$hold"
      # What fleetd says meanwhile (it must answer: the host is not fleetd's to wait for).
      "$fleetctl_bin" --state-dir "$fstate" --timeout 5s status -o wide >"$run_dir/status-cut" 2>&1 ||
        printf 'violation: status: fleetd did not answer status while the host was unreachable: %s\n' \
          "$(tail -1 "$run_dir/status-cut")" >>"$run_dir/violations"
      host_link up
      notes+=("unreachable ${hold}ms")
      fault_cleared=$(now) ;;
  esac
}

# The scenario of injection K of a row: the seed (a start with preflight, remediation, canary) or
# a steady READY fleet.
scenario_of() {
  case $1 in
    fleetd-sigterm-remediation | fleetd-busy | fleetd-disk-full | agent-disk-full | log-* | partition | ssh-*) echo seed ;;
    *) (( $2 % 2 == 0 )) && echo seed || echo steady ;;
  esac
}

# deploy ROW: the config deployed. A remote row's deploy runs beside the fault (it may wait for
# the agent's bootstrap, which the fault strikes): deploy_wait ends it.
deploy_pid=''
deploy() {
  if is_remote "$1"; then
    "$fleetctl_bin" --state-dir "$fstate" deploy -f "$run_dir/fleet.yaml" >>"$run_dir/fleetctl.log" 2>&1 &
    deploy_pid=$!
  else
    fleetctl deploy -f "$run_dir/fleet.yaml" >>"$run_dir/fleetctl.log" 2>&1 || notes+=("deploy failed")
  fi
}
deploy_wait() {
  [[ -n $deploy_pid ]] || return 0
  wait "$deploy_pid" || notes+=("deploy failed")
  deploy_pid=''
}

declare -A injected=() held=() recover=()
total=0
violations_total=0
window_ms=8000

run_one() {  # run_one ROW K
  local row=$1 k=$2 scenario result=ok rc v t0 settled_at recovery=-
  scenario=$(scenario_of "$row" "$k")
  fault_cleared=''
  local vfile
  if ! begin_run "$row" "$k" "$scenario"; then
    printf 'faults: %s #%d: setup failed: %s\n' "$row" "$k" "${notes[*]}" >&2
    teardown
    return 2
  fi
  vfile=$run_dir/violations
  : >"$vfile"
  t0=$(now)
  deploy "$row"
  if [[ $scenario == steady ]]; then
    wait_settled || printf 'violation: settled: the fleet did not get READY before the fault\n' >>"$vfile"
    window_ms=2000
  elif is_remote "$row"; then
    window_ms=$remote_window_ms
  else
    window_ms=$seed_window_ms
  fi
  inject "$row"
  rc=0
  wait_settled || rc=$?
  settled_at=$(now)
  if ((rc == 0)); then
    recovery=$(elapsed "$fault_cleared" "$settled_at")
  elif ((rc == 1)); then
    # What fleetd says (its record may say otherwise: fault-check reads that).
    printf 'violation: settled: not every server READY %ss after the fault cleared; fleetd says: %s\n' \
      "$settle" "$(fleetctl --timeout 5s status 2>&1 | tail -n +2 | awk '{ print $1, $2 }' | tr '\n' ';')" >>"$vfile"
  fi
  # Bystanders: alive, with the start time they had.
  for v in ${bystanders[@]+"${bystanders[@]}"}; do
    local pid=${v%% *} ticks=${v#* }
    [[ $(start_ticks "$pid") == "$ticks" ]] ||
      printf 'violation: bystanders: process %s (started at tick %s) is gone\n' "$pid" "$ticks" >>"$vfile"
  done
  # Settled or not, fleetd reads the agent's stream to its end before it is stopped, so that
  # events_once judges the product, not the moment of the stop (a bounded poll, 10 s).
  local tries
  for ((tries = 0; tries < 40; tries++)); do cursor_caught_up && break; sleep 0.25; done
  if is_remote "$row"; then
    deploy_wait
    check_bootstrap >>"$vfile"
    local said
    said=$(grep -m1 -o 'agent unreachable: .*' "$run_dir/fleetd.log" || true)
    [[ -z $said ]] || notes+=("fleetd: ${said:0:110}")
  fi
  stop_fleet
  local args
  mapfile -t args < <(record_args)
  args+=(--container "$ct_name" --agent-db "$astate/agent.db" --launches "$ledger")
  for v in ${old_agent_dbs[@]+"${old_agent_dbs[@]}"}; do args+=(--old-agent-db "$v"); done
  "$check_bin" "${args[@]}" >>"$vfile" 2>>"$run_dir/check.log" || true
  if [[ -s $run_dir/check.log ]]; then
    printf 'violation: check: %s\n' "$(tr '\n' ' ' <"$run_dir/check.log")" >>"$vfile"
  fi
  # A PostgreSQL record goes with its server: a failed injection keeps its rows as text.
  if [[ $store == postgres ]] && grep -q '^violation:' "$vfile"; then
    record_query dump >"$run_dir/record.txt"
  fi
  stop_store
  # A failed injection's state is kept: what lived on a small disk (the *-disk-full rows) is
  # copied out before it is unmounted (DIR.disk beside it).
  if grep -q '^violation:' "$vfile"; then
    local m
    for m in ${mounts[@]+"${mounts[@]}"}; do cp -a -- "$m/." "$m.disk" 2>/dev/null || true; done
  fi
  unmount_all
  local n
  n=$(grep -c '^violation:' "$vfile" || true)
  ((total += 1))
  ((violations_total += n))
  injected[$row]=$((${injected[$row]:-0} + 1))
  if ((n == 0)); then
    held[$row]=$((${held[$row]:-0} + 1))
  else
    result="$n violations"
  fi
  # The time to recover counts where the fleet recovered: settled, and every invariant held.
  if ((n == 0)) && [[ $recovery != - ]]; then recover[$row]+="$recovery "; fi
  printf '%-27s #%-2d %-6s %-9s recovered %6ss  %s  [%s]\n' "$row" "$k" "$scenario" \
    "$(elapsed "$t0" "$fault_cleared")s" "$recovery" "$result" "${notes[*]}"
  if ((n > 0)); then
    sed 's/^/      /' "$vfile"
    printf '      (state kept in %s)\n' "$run_dir"
  elif [[ $keep != true ]]; then
    rm -rf -- "$run_dir"
  fi
}

printf 'faults: seed %s, rows %s, %d each, speed %s, %d GPUs, record %s, out %s, revision %s\n' "$seed" \
  "${rows[*]}" "$per_row" "$speed" "$gpus" "$store" "$out" "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ $store == sqlite ]] ||
  printf 'faults: integrity: PRAGMA integrity_check is SQLite'"'"'s: checked on agent.db only (the record is in PostgreSQL)\n'

# Calibration: one clean seed start, no fault; its time to READY is the window the random
# moments of seed injections fall in (of a remote row: its time to the agent's bootstrap logged).
# Its invariants count as the control row.
calibrate() {  # calibrate ROW: sets cal_ms
  local c0 logged
  begin_run "$1" 0 seed || die "setup failed: ${notes[*]}"
  deploy "$1"
  c0=$(now)
  if is_remote "$1"; then
    timeout "$settle" grep -q -m1 -E 'container 200: .* started \(' \
      < <(exec tail -n +1 -F --pid="$fleetd_pid" "$run_dir/fleetd.log" 2>/dev/null) ||
      die "the clean remote start bootstrapped no agent within ${settle}s (state in $run_dir)"
    cal_ms=$(awk -v a="$c0" -v b="$(now)" 'BEGIN { printf "%d", (b - a) * 1000 }')
  fi
  wait_settled || die "the clean start did not settle: ${notes[*]} (state in $run_dir)"
  [[ -n ${cal_ms:-} ]] || cal_ms=$(awk -v a="$c0" -v b="$(now)" 'BEGIN { printf "%d", (b - a) * 1000 }')
  deploy_wait
  if is_remote "$1"; then check_bootstrap >"$run_dir/violations"; else : >"$run_dir/violations"; fi
  stop_fleet
  local args
  mapfile -t args < <(record_args)
  args+=(--container "$ct_name" --agent-db "$astate/agent.db" --launches "$ledger")
  "$check_bin" "${args[@]}" >>"$run_dir/violations" 2>&1 || true
  teardown
  if [[ -s $run_dir/violations ]]; then
    sed 's/^/      /' "$run_dir/violations"
    die "the clean start already breaks an invariant (state in $run_dir)"
  fi
  [[ $keep == true ]] || rm -rf -- "$run_dir"
}
cal_ms=''
calibrate none
seed_window_ms=$cal_ms
printf 'faults: a clean seed start is READY in %s ms: seed-scenario faults strike within that\n' "$seed_window_ms"
remote_window_ms=''
for row in "${rows[@]}"; do
  if is_remote "$row"; then
    cal_ms=''
    calibrate "$row"
    remote_window_ms=$cal_ms
    printf 'faults: a clean remote start bootstraps its agent in %s ms: ssh-* faults strike within that\n' "$remote_window_ms"
    break
  fi
done

# Each injection runs in a subshell of its own (at most --jobs at once), with RANDOM seeded from
# the run's seed and its index; its lines and its tally come back in files, printed in order.
results=$out/.results
rm -rf -- "$results"
mkdir -p "$results"
run_slot() {  # run_slot INDEX ROW K
  (
    trap on_exit EXIT
    trap 'exit 130' INT TERM
    RANDOM=$(((seed + $1 * 7919) % 1000000007))
    total=0 violations_total=0
    injected=() held=() recover=()
    run_one "$2" "$3" >"$results/$1.out" 2>&1 || true
    printf '%s %d %d %d %s\n' "$2" "${injected[$2]:-0}" "${held[$2]:-0}" "$violations_total" \
      "${recover[$2]:-}" >"$results/$1.tally"
  ) &
}
slots=() printed=0
print_done() {  # prints, in order, the injections that have finished
  while [[ -e $results/$printed.tally ]]; do
    cat "$results/$printed.out"
    local row n h v rec
    read -r row n h v rec <"$results/$printed.tally"
    ((total += n)) || true
    ((violations_total += v)) || true
    injected[$row]=$((${injected[$row]:-0} + n))
    held[$row]=$((${held[$row]:-0} + h))
    [[ -z $rec ]] || recover[$row]+="$rec "
    printed=$((printed + 1))
  done
}
index=0
for row in "${rows[@]}"; do
  for ((k = 1; k <= per_row; k++)); do
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; print_done; done
    run_slot "$index" "$row" "$k"
    index=$((index + 1))
  done
done
wait || true
print_done
rm -rf -- "$results"

# The table: per row, injections, injections with every invariant held, time to recover.
stats() {  # stats "T1 T2 ...": median/max
  if [[ -z ${1// /} ]]; then printf -- '-'; return; fi
  tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.1f s / %.1f s", m, v[NR] }'
}
printf '\n| fault | injections | invariants held | time to recover (median / max) |\n'
printf '|---|---|---|---|\n'
for row in "${rows[@]}"; do
  printf '| %s | %d | %d/%d | %s |\n' "$row" "${injected[$row]:-0}" "${held[$row]:-0}" \
    "${injected[$row]:-0}" "$(stats "${recover[$row]:-}")"
done
printf '\nfaults: %d injected, %d invariant violations (seed %s)\n' "$total" "$violations_total" "$seed"
((violations_total == 0))
